// polygateway dashboard: polls status.json once a second and draws inline SVG charts.
// No framework, no external asset. The admin key lives in sessionStorage and travels only as an
// Authorization header of this page's fetches.
(function () {
  "use strict";
  var KEY = "pgw-admin-key";
  var base = location.pathname.replace(/\/?$/, "/");
  var COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
    "#7f7f7f", "#bcbd22", "#17becf", "#000000"];
  var BREAKER = { closed: "#2ca02c", open: "#d62728", half_open: "#ff7f0e" };
  var dash = document.getElementById("dash");
  var msg = document.getElementById("msg");
  var range = document.getElementById("range");

  function esc(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }
  function key() { try { return sessionStorage.getItem(KEY) || ""; } catch (e) { return ""; } }
  document.getElementById("keyform").addEventListener("submit", function (ev) {
    ev.preventDefault();
    var input = document.getElementById("key");
    if (input.value) { sessionStorage.setItem(KEY, input.value.trim()); }
    input.value = "";
    poll();
  });
  document.getElementById("forget").addEventListener("click", function () {
    sessionStorage.removeItem(KEY);
    poll();
  });
  range.addEventListener("change", function () { poll(); });

  function clock(ms) {
    var d = new Date(ms);
    return d.toISOString().substr(11, 8);
  }

  // One line chart: `series` is {name: [value|null, ...]}; all series share the x axis.
  function chart(id, title, series, unit) {
    var names = Object.keys(series);
    var W = 360, H = 120, L = 44, B = 16;
    var max = 0, n = 0, points = 0;
    names.forEach(function (k) {
      var s = series[k];
      n = Math.max(n, s.length);
      s.forEach(function (v) {
        if (v !== null && v > max) { max = v; }
        if (v !== null && v > 0) { points++; }
      });
    });
    var top = max > 0 ? max * 1.1 : 1;
    var svg = '<svg width="' + W + '" height="' + H + '" role="img">' +
      '<line x1="' + L + '" y1="' + (H - B) + '" x2="' + W + '" y2="' + (H - B) + '" stroke="#999"/>' +
      '<line x1="' + L + '" y1="0" x2="' + L + '" y2="' + (H - B) + '" stroke="#999"/>' +
      '<text x="2" y="10" font-size="10">' + fmt(top) + '</text>' +
      '<text x="2" y="' + (H - B) + '" font-size="10">0</text>';
    names.forEach(function (k, i) {
      var s = series[k], d = "", pen = false, color = COLORS[i % COLORS.length];
      s.forEach(function (v, j) {
        if (v === null) { pen = false; return; }
        var x = L + (n > 1 ? j * (W - L - 2) / (n - 1) : 0);
        var y = (H - B) - v / top * (H - B - 4);
        d += (pen ? "L" : "M") + x.toFixed(1) + " " + y.toFixed(1) + " ";
        // A point with no neighbour draws no line: show it as a dot.
        var prev = j > 0 ? s[j - 1] : null, next = j + 1 < s.length ? s[j + 1] : null;
        if (prev === null && next === null) {
          svg += '<circle cx="' + x.toFixed(1) + '" cy="' + y.toFixed(1) + '" r="2" fill="' + color + '"/>';
        }
        pen = true;
      });
      if (d) {
        svg += '<path d="' + d + '" fill="none" stroke-width="1.5" stroke="' + color + '"/>';
      }
    });
    svg += "</svg>";
    var legend = names.map(function (k, i) {
      return '<span style="color:' + COLORS[i % COLORS.length] + '">&#9632; ' + esc(k) + "</span>";
    }).join("");
    return '<div class="chart" id="' + esc(id) + '" data-points="' + points + '"><h4>' +
      esc(title) + (unit ? " (" + esc(unit) + ")" : "") + '</h4>' + svg +
      '<div class="legend">' + legend + "</div></div>";
  }
  function fmt(v) {
    if (v >= 100) { return v.toFixed(0); }
    if (v >= 1) { return v.toFixed(1); }
    return v.toPrecision(2);
  }
  // The pacer's "no limit" (u32::MAX) is not a number to scale a chart to.
  function limit(v) { return v >= 4294967295 ? null : v; }
  function perSecond(map, step) {
    var out = {};
    Object.keys(map).forEach(function (k) {
      out[k] = map[k].map(function (v) { return v / step; });
    });
    return out;
  }

  function timeline(id, changes, start, end) {
    var W = 360, H = 14;
    var svg = '<svg width="' + W + '" height="' + H + '">';
    var span = Math.max(1, end - start);
    changes.forEach(function (c, i) {
      var x0 = (c.at_ms - start) / span * W;
      var next = i + 1 < changes.length ? changes[i + 1].at_ms : end;
      var x1 = (next - start) / span * W;
      svg += '<rect x="' + Math.max(0, x0).toFixed(1) + '" y="0" width="' +
        Math.max(1, x1 - Math.max(0, x0)).toFixed(1) + '" height="' + H + '" fill="' +
        (BREAKER[c.to] || "#999") + '"/>';
    });
    svg += "</svg>";
    var list = changes.map(function (c) {
      return '<li class="breaker-change" data-to="' + esc(c.to) + '">' + clock(c.at_ms) +
        " UTC → " + esc(c.to) + "</li>";
    }).join("");
    return '<div class="chart timeline" id="' + esc(id) + '" data-points="' + changes.length +
      '"><h4>breaker timeline</h4>' + svg + "<ul>" + (list || "<li>no change in range</li>") +
      "</ul></div>";
  }

  function table(head, rows) {
    return "<table><tr>" + head.map(function (h) { return "<th>" + esc(h) + "</th>"; }).join("") +
      "</tr>" + rows.map(function (r) {
        return "<tr>" + r.map(function (c) { return "<td>" + c + "</td>"; }).join("") + "</tr>";
      }).join("") + "</table>";
  }

  // The public part (what /healthz and /readyz tell): scopes and sources, up or down.
  function renderPublic(data) {
    var html = "";
    Object.keys(data.scopes).forEach(function (name) {
      var scope = data.scopes[name];
      html += '<h2 id="scope-' + esc(name) + '">' + esc(name) + " <small>(" + esc(scope.kind) +
        ")</small></h2>" + table(["source", "breaker", "up"], Object.keys(scope.sources).map(function (src) {
          var x = scope.sources[src];
          return [esc(src), '<span class="' + esc(x.breaker) + '">' + esc(x.breaker) + "</span>",
            x.up ? "up" : "down"];
        }));
    });
    document.getElementById("public").innerHTML = html;
  }

  function render(data) {
    renderPublic(data);
    var html = "";
    if (!data.operator) {
      html += "<p>The series, spend, budgets, keys and tenants need an admin key.</p>";
      dash.innerHTML = html;
      return;
    }
    var v = data.series, step = v.step_s;
    var start = v.start * 1000, end = (v.now + 1) * 1000;
    html += '<p id="range-info">' + v.points + " points of " + step + " s, " +
      clock(start) + "–" + clock(end) + " UTC · series memory " +
      (data.series_bytes / 1048576).toFixed(1) + " MiB</p>";
    Object.keys(data.scopes).forEach(function (name) {
      var s = v.scopes[name], scope = data.scopes[name];
      html += '<section class="scope" data-scope="' + esc(name) + '"><h3>' + esc(name) + "</h3>";
      if (!s) { html += "<p>no series yet</p></section>"; return; }
      var errors = {};
      Object.keys(s.calls).forEach(function (k) { if (k !== "ok") { errors[k] = s.calls[k]; } });
      html += '<div class="charts">' +
        chart("calls-" + name, "calls/s by outcome", perSecond(s.calls, step)) +
        chart("errors-" + name, "errors/refusals per s by reason",
          Object.keys(errors).length ? perSecond(errors, step) : { none: s.calls.ok.map(function () { return 0; }) }) +
        chart("latency-" + name, "latency and TTFT", {
          p50: s.latency_ms.p50, p95: s.latency_ms.p95, p99: s.latency_ms.p99,
          "ttft p50": s.ttft_ms.p50, "ttft p95": s.ttft_ms.p95, "ttft p99": s.ttft_ms.p99
        }, "ms") +
        chart("wait-" + name, "capacity wait by reason", s.capacity_wait_s, "s") +
        chart("spend-" + name, "spend per point", { spend: s.spend }) +
        "</div>";
      Object.keys(s.sources).forEach(function (src) {
        var x = s.sources[src], up = scope.sources[src];
        html += '<h4 class="source-title">' + esc(name) + " / " + esc(src) + " — " +
          esc(up ? up.breaker : "?") + '</h4><div class="charts">' +
          chart("attempts-" + name + "-" + src, "attempts/s by result", perSecond(x.attempts, step)) +
          chart("srclatency-" + name + "-" + src, "attempt latency and TTFT", {
            p50: x.latency_ms.p50, p95: x.latency_ms.p95, p99: x.latency_ms.p99,
            "ttft p50": x.ttft_ms.p50, "ttft p95": x.ttft_ms.p95, "ttft p99": x.ttft_ms.p99
          }, "ms") +
          chart("pacer-" + name + "-" + src, "pacer limit vs in flight",
            { "pacer limit": x.pacer_limit.map(limit), "in flight": x.in_flight }) +
          timeline("breaker-" + name + "-" + src, x.breaker, start, end) + "</div>";
      });
      if (scope.recent_errors && scope.recent_errors.length) {
        html += "<ul class=\"recent\">" + scope.recent_errors.map(function (e) {
          return "<li>" + clock(e.at_ms) + " UTC " + e.status + " " + esc(e.code) + ": " +
            esc(e.message) + "</li>";
        }).join("") + "</ul>";
      }
      html += "</section>";
    });
    if (Array.isArray(data.budgets) && data.budgets.length) {
      html += "<h3>spend budgets</h3>" + table(
        ["budget", "window", "spent", "limit", "remaining", "resets in", "spend/min", "exhausted in"],
        data.budgets.map(function (b) {
          return [esc(b.name), esc(b.period), b.spent.toFixed(6), b.limit.toFixed(6),
            b.remaining.toFixed(6), b.resets_in_s + " s", (b.spend_per_s * 60).toFixed(6),
            b.exhausted_in_s === null ? "not at this rate" : Math.round(b.exhausted_in_s) + " s"];
        }));
    }
    [["keys", "top virtual keys"], ["tenants", "top tenants"]].forEach(function (p) {
      var list = v[p[0]];
      html += "<h3>" + p[1] + "</h3>" + (list.length ? table(
        ["name", "calls", "failed", "spend"],
        list.map(function (k) { return [esc(k.name), k.calls, k.errors, k.spend.toFixed(6)]; })
      ) : "<p>no calls in range</p>");
    });
    dash.innerHTML = html;
  }

  var timer = null, busy = false;
  function poll() {
    if (timer) { clearTimeout(timer); timer = null; }
    if (busy) { return; }
    busy = true;
    var headers = {};
    if (key()) { headers.Authorization = "Bearer " + key(); }
    fetch(base + "status.json?range=" + encodeURIComponent(range.value),
      { headers: headers, cache: "no-store" })
      .then(function (r) {
        return r.json().then(function (body) { return { status: r.status, body: body }; });
      })
      .then(function (r) {
        if (r.status !== 200) {
          msg.textContent = r.status + ": " + (r.body.error ? r.body.error.message : "refused");
          dash.innerHTML = "";
          return;
        }
        msg.textContent = "";
        document.getElementById("serving").textContent = r.body.status;
        render(r.body);
      })
      .catch(function (e) { msg.textContent = "status.json: " + e; })
      .then(function () {
        busy = false;
        timer = setTimeout(poll, 1000);
      });
  }
  poll();
})();
