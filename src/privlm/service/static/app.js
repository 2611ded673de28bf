/* The privlm page: perturb a file locally (perturb.js), upload only the perturbed text,
 * start jobs and watch their progress. */
(function () {
  "use strict";
  var P = window.PrivlmPerturb;
  var $ = function (id) { return document.getElementById(id); };
  var state = { key: sessionStorage.getItem("privlm-key") || "", perturbed: null, vocab: {} };

  function api(path, opts) {
    opts = opts || {};
    opts.headers = Object.assign({ Authorization: "Bearer " + state.key }, opts.headers || {});
    return fetch(path, opts).then(function (r) {
      return r.json().then(function (body) {
        if (!r.ok) throw new Error((body.error && body.error.message) || r.statusText);
        return body;
      });
    });
  }

  function status(id, text, isError) {
    var el = $(id); el.textContent = text; el.className = isError ? "error" : "";
  }

  function loadVocabulary(clip) {
    if (state.vocab[clip]) return Promise.resolve(state.vocab[clip]);
    return Promise.all([
      fetch("/v1/perturb/words?clip=" + clip).then(function (r) { return r.json(); }),
      fetch("/v1/perturb/vectors?clip=" + clip).then(function (r) { return r.arrayBuffer(); }),
    ]).then(function (res) {
      var v = P.makeVocabulary(res[0].words, new Float32Array(res[1]), res[0].dim);
      state.vocab[clip] = v;
      return v;
    });
  }

  /* Records of the file: .txt one per line; .jsonl / .csv the text field of each row (the
   * other fields, e.g. label, are kept as they are). */
  function parseCsv(text) {
    var rows = [], row = [], field = "", q = false;
    for (var i = 0; i < text.length; i++) {
      var c = text[i];
      if (q) {
        if (c === '"' && text[i + 1] === '"') { field += '"'; i++; }
        else if (c === '"') q = false;
        else field += c;
      } else if (c === '"') q = true;
      else if (c === ",") { row.push(field); field = ""; }
      else if (c === "\n" || c === "\r") {
        if (c === "\r" && text[i + 1] === "\n") i++;
        row.push(field); rows.push(row); row = []; field = "";
      } else field += c;
    }
    if (field !== "" || row.length) { row.push(field); rows.push(row); }
    return rows.filter(function (r) { return r.length > 1 || r[0] !== ""; });
  }
  function csvCell(s) { return /[",\n\r]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s; }

  /* Parse the file into its texts (and how to put perturbed texts back), then perturb them
   * in slices so the page stays responsive and shows its progress. */
  function parseFile(name, text, field) {
    var ext = name.toLowerCase().split(".").pop(), texts = [], render;
    var lines = text.split(/\r\n|\r|\n/);
    if (lines.length && lines[lines.length - 1] === "") lines.pop();
    if (ext === "txt") {
      lines.forEach(function (l) { if (l.trim()) texts.push(l); });
      render = function (out) {
        var k = 0;
        return lines.map(function (l) { return l.trim() ? out[k++] : ""; }).join("\n");
      };
    } else if (ext === "jsonl") {
      var objs = lines.filter(function (l) { return l.trim(); }).map(function (l, i) {
        var o;
        try { o = JSON.parse(l); } catch (e) { throw new Error("line " + (i + 1) + ": invalid JSON"); }
        if (typeof o[field] !== "string") throw new Error("line " + (i + 1) + ": no text field '" + field + "'");
        texts.push(o[field]);
        return o;
      });
      render = function (out) {
        return objs.map(function (o, i) { o[field] = out[i]; return JSON.stringify(o); }).join("\n");
      };
    } else if (ext === "csv") {
      var rows = parseCsv(text), col = rows.length ? rows[0].indexOf(field) : -1;
      if (col < 0) throw new Error("no '" + field + "' column in the header");
      rows.slice(1).forEach(function (r) { texts.push(r[col] || ""); });
      render = function (out) {
        return rows.map(function (r, i) {
          if (i > 0) r[col] = out[i - 1];
          return r.map(csvCell).join(",");
        }).join("\n");
      };
    } else throw new Error("unsupported file type ." + ext + "; use .txt, .jsonl or .csv");
    return { texts: texts, render: render };
  }

  function perturbFile(name, text, vocab, mech, field, onProgress) {
    var parsed = parseFile(name, text, field), outputs = [], longest = 0, words = 0, i = 0;
    return new Promise(function (resolve, reject) {
      function slice() {
        try {
          var until = Date.now() + 50;
          while (i < parsed.texts.length && Date.now() < until) {
            var r = P.perturbText(parsed.texts[i++], vocab, mech);
            outputs.push(r.text);
            longest = Math.max(longest, r.words); words += r.words;
          }
          onProgress(i, parsed.texts.length);
          if (i < parsed.texts.length) { setTimeout(slice, 0); return; }
          resolve({
            name: name.replace(/(\.[^.]+)$/, ".perturbed$1"), text: parsed.render(outputs) + "\n",
            originals: parsed.texts, outputs: outputs,
            perWord: mech.wordGuarantee(), perRecord: mech.documentGuarantee(longest),
            perFile: mech.documentGuarantee(words), mechanism: mech.name,
          });
        } catch (e) { reject(e); }
      }
      slice();
    });
  }

  function fmt(g) {
    return "ε = " + (+g.epsilon).toPrecision(4) + (g.delta ? ", δ = " + g.delta : ", δ = 0") +
      (g.words !== undefined ? " (" + g.words + " words)" : "");
  }

  function onPerturb() {
    var file = $("file").files[0];
    if (!file) return;
    var name = $("mechanism").value, eps = parseFloat($("epsilon").value);
    var delta = parseFloat($("delta").value), clip = parseFloat($("clip").value);
    var mech;
    try { mech = P.makeMechanism(name, eps, name === "gaussian" ? delta : undefined, clip); }
    catch (e) { status("perturb-status", e.message, true); return; }
    status("perturb-status", "loading word vectors…");
    Promise.all([loadVocabulary(clip), file.text()]).then(function (res) {
      return perturbFile(file.name, res[1], res[0], mech, $("text-field").value || "text",
        function (done, total) {
          status("perturb-status", "perturbing… " + done + " of " + total + " records");
          $("perturb-progress").max = total || 1; $("perturb-progress").value = done;
        });
    }).then(function (p) {
      state.perturbed = p;
      $("g-word").textContent = fmt(p.perWord) + (p.perWord.metric_epsilon ? "; metric ε = " +
        p.perWord.metric_epsilon.toPrecision(4) + " per unit distance" : "; σ = " + p.perWord.sigma.toPrecision(4));
      $("g-record").textContent = fmt(p.perRecord);
      $("g-doc").textContent = fmt(p.perFile);
      $("guarantee").hidden = false;
      var body = $("preview-table").tBodies[0];
      body.innerHTML = "";
      for (var i = 0; i < Math.min(5, p.originals.length); i++) {
        var tr = body.insertRow();
        tr.insertCell().textContent = p.originals[i];
        tr.insertCell().textContent = p.outputs[i];
      }
      $("preview").hidden = false;
      $("ds-name").value = $("ds-name").value || file.name;
      $("upload").disabled = false;
      status("perturb-status", "done: " + p.originals.length + " records perturbed in this browser");
    }).catch(function (e) { status("perturb-status", e.message, true); });
  }

  function onUpload() {
    var p = state.perturbed;
    if (!p) return;
    var form = new FormData();
    form.append("file", new Blob([p.text], { type: "text/plain" }), p.name);
    form.append("name", $("ds-name").value);
    form.append("budget_epsilon", $("budget-epsilon").value);
    form.append("budget_delta", $("budget-delta").value);
    form.append("perturbation", JSON.stringify({
      mechanism: p.mechanism, per_word: p.perWord, per_record: p.perRecord, per_file: p.perFile,
      where: "browser",
    }));
    status("upload-status", "uploading…");
    api("/v1/datasets", { method: "POST", body: form }).then(function (ds) {
      status("upload-status", "stored as " + ds.id + " (" + ds.records + " records)");
      refresh();
    }).catch(function (e) { status("upload-status", e.message, true); });
  }

  function refresh() {
    if (!state.key) return;
    api("/v1/datasets").then(function (r) {
      var sel = $("job-dataset"), keep = sel.value;
      sel.innerHTML = "";
      r.data.forEach(function (d) {
        var o = document.createElement("option");
        o.value = d.id; o.textContent = d.name + " (" + d.records + " records)";
        sel.appendChild(o);
      });
      if (keep) sel.value = keep;
    }).catch(function () {});
    api("/v1/jobs").then(function (r) {
      var body = $("jobs").tBodies[0];
      body.innerHTML = "";
      r.data.slice().reverse().forEach(function (j) {
        var tr = body.insertRow();
        tr.insertCell().textContent = j.id;
        tr.insertCell().textContent = j.kind;
        tr.insertCell().textContent = j.status + (j.error ? ": " + j.error : "");
        var cell = tr.insertCell(), bar = document.createElement("span"), fill = document.createElement("span");
        bar.className = "bar"; fill.style.width = j.progress.percent + "%"; bar.appendChild(fill);
        cell.appendChild(bar);
        cell.appendChild(document.createTextNode(" " + j.progress.percent.toFixed(0) + "% " + (j.stage || "")));
        tr.insertCell().textContent = j.epsilon.spent === null ? "–" : (+j.epsilon.spent).toPrecision(4);
      });
    }).catch(function () {});
  }

  function onSubmitJob() {
    var kind = $("job-kind").value, params = {};
    if (kind !== "ensemble") params.epsilon = parseFloat($("job-epsilon").value);
    api("/v1/jobs", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ kind: kind, dataset_id: $("job-dataset").value, params: params }),
    }).then(function (j) { status("job-status", "queued " + j.id); refresh(); })
      .catch(function (e) { status("job-status", e.message, true); });
  }

  $("api-key").value = state.key;
  $("save-key").addEventListener("click", function () {
    state.key = $("api-key").value.trim();
    sessionStorage.setItem("privlm-key", state.key);
    status("key-status", state.key ? "key set" : "");
    refresh();
  });
  $("mechanism").addEventListener("change", function () { $("delta-label").hidden = $("mechanism").value !== "gaussian"; });
  $("file").addEventListener("change", function () { $("perturb").disabled = !$("file").files.length; $("upload").disabled = true; });
  $("perturb").addEventListener("click", onPerturb);
  $("upload").addEventListener("click", onUpload);
  $("submit-job").addEventListener("click", onSubmitJob);
  setInterval(refresh, 2000);
  refresh();
})();
