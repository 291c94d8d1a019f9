// accel console: the one script (no inline scripts; the CSP forbids them).
// Refresh: every few seconds ask /changes for the change token; when it differs from
// the page's data-stamp, fetch the page again and swap <main>. Pages with
// data-refresh="off" (forms, errors) are left alone.
(function () {
  "use strict";
  var body = document.body;
  if (!body || body.getAttribute("data-refresh") === "off") {
    return;
  }
  var every = 3000;
  var busy = false;

  function swap(html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    var fresh = doc.getElementById("content");
    var here = document.getElementById("content");
    if (!fresh || !here) {
      return;
    }
    here.replaceWith(fresh);
    var stamp = doc.body.getAttribute("data-stamp");
    if (stamp !== null) {
      body.setAttribute("data-stamp", stamp);
    }
    body.setAttribute("data-refreshed", String(Date.now()));
  }

  function tick() {
    if (busy || document.hidden) {
      return;
    }
    busy = true;
    fetch("/changes", { credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (!r.ok) {
          throw new Error("changes: " + r.status);
        }
        return r.text();
      })
      .then(function (token) {
        if (token === body.getAttribute("data-stamp")) {
          return null;
        }
        return fetch(location.href, { credentials: "same-origin", cache: "no-store" })
          .then(function (r) {
            return r.ok ? r.text() : null;
          })
          .then(function (html) {
            if (html !== null) {
              swap(html);
            }
          });
      })
      .catch(function () {
        /* the next tick tries again */
      })
      .then(function () {
        busy = false;
      });
  }

  setInterval(tick, every);
})();
