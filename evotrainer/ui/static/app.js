// EvoTrainer dashboard: the only script. Two small behaviours, no dependencies.
// 1. A page with [data-poll] (a campaign) asks the server every 5 s whether the campaign changed; if it did,
//    the page reloads itself, unless the reader is typing in a form, in which case a notice offers a reload.
// 2. A form with [data-confirm] asks before it is submitted (stopping a campaign).
"use strict";
(function () {
  function typing() {
    var el = document.activeElement;
    if (el && (el.tagName === "TEXTAREA" || el.tagName === "INPUT" || el.tagName === "SELECT")) return true;
    var areas = document.querySelectorAll("textarea");
    for (var i = 0; i < areas.length; i++) if (areas[i].value.trim() !== "") return true;
    return false;
  }

  function poll(box) {
    var url = box.getAttribute("data-poll");
    var stamp = box.getAttribute("data-stamp");
    var note = document.getElementById("live-note");
    var timer = setInterval(function () {
      if (document.hidden) return;
      fetch(url, {credentials: "same-origin", headers: {"Accept": "application/json"}})
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (doc) {
          if (!doc || doc.stamp === stamp) return;
          if (typing()) {
            if (note) note.classList.remove("hidden");
            clearInterval(timer);
          } else {
            window.location.reload();
          }
        })
        .catch(function () { /* server restarting: try again at the next tick */ });
    }, 5000);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var boxes = document.querySelectorAll("[data-poll]");
    for (var i = 0; i < boxes.length; i++) poll(boxes[i]);
    var forms = document.querySelectorAll("form[data-confirm]");
    for (var j = 0; j < forms.length; j++) {
      forms[j].addEventListener("submit", function (ev) {
        if (!window.confirm(this.getAttribute("data-confirm"))) ev.preventDefault();
      });
    }
    var reject = document.getElementById("reject");
    var comment = document.getElementById("comment");
    if (reject && comment) {
      reject.addEventListener("click", function (ev) {
        if (comment.value.trim() === "") {
          ev.preventDefault();
          comment.setCustomValidity("Say why you reject it: the comment is recorded with the review.");
          comment.reportValidity();
        }
      });
      comment.addEventListener("input", function () { comment.setCustomValidity(""); });
    }
  });
})();
