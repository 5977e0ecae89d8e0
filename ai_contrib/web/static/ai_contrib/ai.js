// The NPC page's memory search and archive paging: both read the page's JSON API and insert
// what it returns as text (textContent), never as markup: stored text is players' words.
(function () {
  "use strict";

  function cell(row, text) {
    var td = document.createElement("td");
    td.textContent = text === null || text === undefined ? "" : String(text);
    row.appendChild(td);
    return td;
  }

  function getJSON(url) {
    return fetch(url, {credentials: "same-origin", headers: {"Accept": "application/json"}})
      .then(function (response) {
        return response.json().then(function (body) {
          if (!response.ok) { throw new Error(body.detail || JSON.stringify(body)); }
          return body;
        });
      });
  }

  var form = document.getElementById("search-form");
  if (form) {
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      var out = document.getElementById("search-results");
      var params = new URLSearchParams();
      params.set("q", document.getElementById("search-q").value);
      var audience = document.getElementById("search-audience").value;
      if (audience) { params.append("audience", audience); }
      out.textContent = "searching...";
      getJSON(form.dataset.api + "?" + params.toString()).then(function (data) {
        out.textContent = "";
        var head = document.createElement("p");
        head.textContent = data.results.length + " result(s) for \u201c" + data.query + "\u201d" +
          (data.audience ? " heard by " + data.audience.join(", ") : " (no audience filter)");
        out.appendChild(head);
        if (data.results.length) {
          var table = document.createElement("table");
          table.className = "search-results";
          var header = table.insertRow();
          ["source", "ref", "kind", "fused score", "vector", "BM25", "text"].forEach(function (h) {
            var th = document.createElement("th"); th.textContent = h; header.appendChild(th);
          });
          data.results.forEach(function (r) {
            var row = table.insertRow();
            row.className = "search-result";
            cell(row, r.source); cell(row, r.ref); cell(row, r.kind);
            cell(row, r.score === null ? "" : r.score.toFixed(4));
            cell(row, r.vector_score === null ? "-" : r.vector_score.toFixed(3));
            cell(row, r.bm25_score === null ? "-" : r.bm25_score.toFixed(3));
            cell(row, r.text);
          });
          out.appendChild(table);
          var pre = document.createElement("pre");
          pre.className = "section-text";
          pre.textContent = data.text;
          out.appendChild(pre);
        }
      }).catch(function (err) { out.textContent = "search failed: " + err.message; });
    });
  }

  var archive = document.getElementById("archive");
  if (archive) {
    var size = parseInt(archive.dataset.pageSize, 10);
    var start = parseInt(archive.dataset.start, 10);
    var load = function (from) {
      from = Math.max(0, from);
      getJSON(archive.dataset.api + "?start=" + from + "&count=" + size).then(function (page) {
        start = page.start;
        var body = document.getElementById("archive-rows");
        body.textContent = "";
        page.records.forEach(function (r) {
          var row = body.insertRow();
          cell(row, r.seq);
          cell(row, r.kind + (r.has_receipt ? " (receipt)" : ""));
          cell(row, (r.timestamp || "").slice(0, 19));
          cell(row, r.name || r.role || "");
          cell(row, r.in_context ? "yes" : "no");
          cell(row, r.content);
        });
        document.getElementById("archive-range").textContent =
          "seq " + page.start + ".." + page.end + " of 0.." + page.last_seq;
      }).catch(function (err) {
        document.getElementById("archive-range").textContent = "archive failed: " + err.message;
      });
    };
    document.getElementById("archive-prev").addEventListener("click", function () { load(start - size); });
    document.getElementById("archive-next").addEventListener("click", function () { load(start + size); });
  }
})();
