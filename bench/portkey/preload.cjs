// Preloaded into the Portkey gateway by bench/portkey_gateway.py (node --require ...).
//
// 1. Loopback only: its start-server.js calls @hono/node-server's serve({fetch, port})
//    with no hostname, which listens on every interface; the benchmarks listen on
//    loopback only, so a listen() that names a port but no host gets 127.0.0.1.
// 2. Keep-alive 300 s (Node's default is 5 s), as the LiteLLM proxy is given, so the
//    load generator's pooled connections survive the pauses while other targets are
//    measured (otherwise a reused connection can be closed under a request).
"use strict";
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number" && (args.length < 2 || typeof args[1] !== "string")) {
    args.splice(1, 0, "127.0.0.1");
  } else if (args[0] && typeof args[0] === "object" && args[0].port !== undefined && !args[0].host) {
    args[0] = { ...args[0], host: "127.0.0.1" };
  }
  if ("keepAliveTimeout" in this) {
    this.keepAliveTimeout = 300000;
    this.headersTimeout = 301000;
  }
  return listen.apply(this, args);
};
