// metaq dashboard: sparklines, body preview tabs, offset reset. No build step.
"use strict";
function sparklines() {
  document.querySelectorAll("svg.spark").forEach(function (svg) {
    var vals = (svg.dataset.values || "").split(",").filter(function (s) { return s !== ""; }).map(Number);
    var w = +svg.getAttribute("width"), h = +svg.getAttribute("height");
    if (vals.length < 2) { return; }
    var hi = Math.max.apply(null, vals), lo = Math.min.apply(null, vals), span = (hi - lo) || 1;
    var pts = vals.map(function (v, i) {
      return (i * (w - 2) / (vals.length - 1) + 1).toFixed(1) + "," + (h - 2 - (v - lo) * (h - 4) / span).toFixed(1);
    }).join(" ");
    var line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("points", pts);
    svg.appendChild(line);
    var t = document.createElementNS("http://www.w3.org/2000/svg", "title");
    t.textContent = "min " + lo + ", max " + hi + ", last " + vals[vals.length - 1];
    svg.appendChild(t);
  });
}
function tabs() {
  document.querySelectorAll(".tabs").forEach(function (box) {
    function show(name) {
      box.querySelectorAll("[data-pane]").forEach(function (p) { p.hidden = p.dataset.pane !== name; });
      box.querySelectorAll("button[data-tab]").forEach(function (b) { b.classList.toggle("on", b.dataset.tab === name); });
    }
    box.querySelectorAll("button[data-tab]").forEach(function (b) {
      b.addEventListener("click", function () { show(b.dataset.tab); });
    });
    show(box.dataset.default || "text");
  });
}
function resetForm() {
  var form = document.getElementById("reset");
  if (!form) { return; }
  var out = document.getElementById("reset-result");
  var tok = form.elements.token;
  tok.value = sessionStorage.getItem("metaqToken") || "";
  function send(to) {
    var body = { topic: form.elements.topic.value, to: to, partition: form.elements.partition.value.trim(), force: form.elements.force.checked };
    sessionStorage.setItem("metaqToken", tok.value);
    out.textContent = "…";
    fetch("/api/v1/groups/" + encodeURIComponent(form.dataset.group) + "/reset", {
      method: "POST",
      headers: { "Content-Type": "application/json", "Authorization": "Bearer " + tok.value },
      body: JSON.stringify(body)
    }).then(function (r) {
      return r.json().then(function (j) { return { status: r.status, body: j }; });
    }).then(function (res) {
      out.dataset.status = String(res.status);
      if (res.status === 200) {
        out.className = "";
        out.textContent = "reset " + res.body.changes.length + " partition(s) to " + res.body.to + "\n" +
          res.body.changes.map(function (c) { return c.partition + ": " + (c.old === undefined ? "–" : c.old) + " → " + c.new; }).join("\n");
      } else {
        out.className = "error";
        out.textContent = res.status + ": " + res.body.error;
      }
    }).catch(function (e) { out.className = "error"; out.textContent = String(e); });
  }
  form.addEventListener("submit", function (ev) { ev.preventDefault(); send(form.elements.to.value); });
  document.getElementById("skip").addEventListener("click", function () { send("latest"); });
}
document.addEventListener("DOMContentLoaded", function () { sparklines(); tabs(); resetForm(); });
