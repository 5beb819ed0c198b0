// Member Console: the few behaviours the pages need beyond htmx. The Content-Security-Policy
// (script-src 'self') allows no inline script or event handler, so they live here, served like
// htmx under a hashed address. No dependencies, no build step.
//
// Copy buttons: `<button type="button" data-copy="VALUE">` beside the `<code>` showing VALUE
// (both inside a `.copyable`). A click puts VALUE on the clipboard and says "Copied" for 2 s, on
// the button and in a polite live region (the button's aria-label would hide its new text from
// a screen reader). Without the clipboard API (an http page not on localhost, an old browser),
// or when the browser refuses it, the code's text is selected instead, ready to copy by hand.
// One listener on the document: buttons that htmx swaps in later work too.
"use strict";

(function () {
  var SHOWN_MS = 2000;
  var LIVE_ID = "console-live";

  // A live region must be in the page before it changes to be announced: made at load, and
  // again if an htmx swap of the whole body took it away.
  function liveRegion() {
    var region = document.getElementById(LIVE_ID);
    if (!region) {
      region = document.createElement("div");
      region.id = LIVE_ID;
      region.className = "visually-hidden";
      region.setAttribute("aria-live", "polite");
      document.body.appendChild(region);
    }
    return region;
  }

  function announce(words) {
    var region = liveRegion();
    // Emptied first, so the same words twice in a row are read twice.
    region.textContent = "";
    window.setTimeout(function () {
      region.textContent = words;
    }, 50);
  }

  // The button's own words for 2 s, then its label again; a second click restarts the wait.
  function show(button, words) {
    if (button.dataset.copyLabel === undefined) {
      button.dataset.copyLabel = button.textContent;
    }
    button.textContent = words;
    window.clearTimeout(Number(button.dataset.copyTimer));
    button.dataset.copyTimer = String(
      window.setTimeout(function () {
        button.textContent = button.dataset.copyLabel;
        delete button.dataset.copyTimer;
      }, SHOWN_MS)
    );
    announce(words);
  }

  function selectBeside(button) {
    var holder = button.closest(".copyable");
    var code = holder && holder.querySelector("code");
    var selection = window.getSelection && window.getSelection();
    if (!code || !selection) {
      show(button, "Copy it by hand");
      return;
    }
    var range = document.createRange();
    range.selectNodeContents(code);
    selection.removeAllRanges();
    selection.addRange(range);
    show(button, "Selected: copy it now");
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("button[data-copy]");
    if (!button) {
      return;
    }
    event.preventDefault();
    var value = button.dataset.copy;
    if (!navigator.clipboard || !navigator.clipboard.writeText) {
      selectBeside(button);
      return;
    }
    navigator.clipboard.writeText(value).then(
      function () {
        show(button, "Copied");
      },
      function () {
        selectBeside(button);
      }
    );
  });

  if (document.body) {
    liveRegion();
  } else {
    document.addEventListener("DOMContentLoaded", liveRegion);
  }
})();
