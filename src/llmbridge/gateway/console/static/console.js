// The console's one script of its own (no inline script: the CSP forbids it).
// A fragment answered 401 means the session ended (expired, signed out elsewhere,
// the master key changed): go to the sign-in page instead of polling in vain.
document.addEventListener("htmx:beforeSwap", function (event) {
  if (event.detail.xhr.status === 401) {
    event.detail.shouldSwap = false;
    event.detail.isError = false;
    window.location.assign("/ui/sign-in");
  }
});
