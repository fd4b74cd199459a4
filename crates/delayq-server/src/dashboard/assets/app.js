// delayq dashboard: live updates without reloads (docs/dashboard.md).
//
// Every element with a data-live attribute is fetched again from the page's own URL every
// two seconds, with the X-Delayq-Fragment header so that the server renders only that part,
// and its content is swapped in. The server renders its own errors (a storage outage is a
// banner) into the part, so a 503 answer is shown like any other. Only a request that gets
// no answer at all shows the "server not answering" banner, which goes away by itself once
// the server answers again. A part the user is typing in is left alone until focus leaves it.
(function () {
  "use strict";
  var PERIOD_MS = 2000;
  var offline = document.getElementById("offline");

  function setOffline(down) {
    if (!offline) return;
    offline.hidden = !down;
    document.body.classList.toggle("is-offline", down);
  }

  function refresh(part) {
    if (part.contains(document.activeElement) && document.activeElement !== document.body) {
      return Promise.resolve();
    }
    var controller = new AbortController();
    var timer = setTimeout(function () { controller.abort(); }, PERIOD_MS * 2);
    return fetch(window.location.href, {
      headers: { "X-Delayq-Fragment": "1" },
      credentials: "same-origin",
      cache: "no-store",
      signal: controller.signal,
    }).then(function (res) {
      clearTimeout(timer);
      if (res.redirected && res.url.indexOf("/ui/login") !== -1) {
        window.location.href = res.url;
        return;
      }
      return res.text().then(function (html) {
        setOffline(false);
        if (part.contains(document.activeElement) && document.activeElement !== document.body) {
          return;
        }
        part.innerHTML = html;
        part.setAttribute("data-refreshed", String(Date.now()));
      });
    }).catch(function () {
      clearTimeout(timer);
      setOffline(true);
    });
  }

  function tick() {
    var parts = document.querySelectorAll("[data-live]");
    var all = [];
    for (var i = 0; i < parts.length; i++) all.push(refresh(parts[i]));
    Promise.all(all).then(function () { setTimeout(tick, PERIOD_MS); });
  }

  // Buttons that delete or change many tasks ask first.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) event.preventDefault();
  });

  setTimeout(tick, PERIOD_MS);
})();
