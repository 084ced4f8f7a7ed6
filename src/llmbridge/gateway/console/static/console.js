// The console's one script of its own (no inline script: the CSP forbids it).
// A fragment answered 401 means the session ended (expired, signed out elsewhere,
// the master key changed): go to the sign-in page instead of polling in vain.
// A fragment answered 503 says the database is unavailable: show it in place of the
// rows (htmx swaps only 2xx answers by itself), and keep polling.
document.addEventListener("htmx:beforeSwap", function (event) {
  var status = event.detail.xhr.status;
  if (status === 401) {
    event.detail.shouldSwap = false;
    event.detail.isError = false;
    window.location.assign("/ui/sign-in");
  } else if (status === 503) {
    event.detail.shouldSwap = true;
    event.detail.isError = false;
  }
});
