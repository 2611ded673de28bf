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

  /* Parse the file into its texts and, for .jsonl/.csv, every row's other columns. Nothing
   * of a row but the perturbed text, a label the user picks and a keyed pseudonym of a user
   * id the user picks is ever uploaded (see buildUpload). */
  function parseFile(name, text, field) {
    var ext = name.toLowerCase().split(".").pop(), texts = [], rows = [], columns = [];
    var lines = text.split(/\r\n|\r|\n/);
    if (lines.length && lines[lines.length - 1] === "") lines.pop();
    if (ext === "txt") {
      lines.forEach(function (l) { if (l.trim()) texts.push(l); });
    } else if (ext === "jsonl") {
      var seen = {};
      lines.filter(function (l) { return l.trim(); }).forEach(function (l, i) {
        var o;
        try { o = JSON.parse(l); } catch (e) { throw new Error("line " + (i + 1) + ": invalid JSON"); }
        if (typeof o[field] !== "string") throw new Error("line " + (i + 1) + ": no text field '" + field + "'");
        texts.push(o[field]);
        rows.push(o);
        Object.keys(o).forEach(function (k) { if (k !== field && !seen[k]) { seen[k] = 1; columns.push(k); } });
      });
    } else if (ext === "csv") {
      var table = parseCsv(text), header = table.length ? table[0] : [], col = header.indexOf(field);
      if (col < 0) throw new Error("no '" + field + "' column in the header");
      columns = header.filter(function (h, j) { return j !== col; });
      table.slice(1).forEach(function (r) {
        var o = {};
        header.forEach(function (h, j) { o[h] = r[j] === undefined ? "" : r[j]; });
        texts.push(r[col] || "");
        rows.push(o);
      });
    } else throw new Error("unsupported file type ." + ext + "; use .txt, .jsonl or .csv");
    return { kind: ext, texts: texts, rows: rows, columns: columns };
  }

  /* A keyed pseudonym for user ids: HMAC-SHA256 under a random key made in this page, never
   * exported and never uploaded. The same id gets the same pseudonym within one upload, so
   * the server can still treat a user's records as one privacy unit. */
  function makePseudonymiser() {
    if (!(window.crypto && crypto.subtle)) {
      return Promise.reject(new Error("pseudonymising user ids needs a secure context " +
        "(https, or the page on localhost); choose no user id column, or use privlm perturb"));
    }
    var raw = new Uint8Array(32);
    crypto.getRandomValues(raw);
    return crypto.subtle.importKey("raw", raw, { name: "HMAC", hash: "SHA-256" }, false, ["sign"])
      .then(function (key) {
        raw.fill(0);
        return function (id) {
          return crypto.subtle.sign("HMAC", key, new TextEncoder().encode(String(id))).then(function (mac) {
            return "u" + Array.from(new Uint8Array(mac).slice(0, 16)).map(function (b) {
              return b.toString(16).padStart(2, "0");
            }).join("");
          });
        };
      });
  }

  /* The records to upload, given the user's column choices: {text, label?, user_id?}. */
  function buildUpload(p, labelCol, userCol) {
    var pseudo = userCol ? p.pseudonymiser() : Promise.resolve(null);
    return pseudo.then(function (f) {
      return Promise.all(p.outputs.map(function (out, i) {
        var rec = { text: out }, row = p.rows[i] || {};
        if (labelCol) rec.label = row[labelCol] === undefined || row[labelCol] === null ? "" : String(row[labelCol]);
        if (!userCol) return rec;
        return f(row[userCol] === undefined ? "" : row[userCol]).then(function (u) { rec.user_id = u; return rec; });
      }));
    });
  }

  function serialise(kind, records) {
    if (kind === "txt") return records.map(function (r) { return r.text; }).join("\n") + "\n";
    if (kind === "jsonl") return records.map(function (r) { return JSON.stringify(r); }).join("\n") + "\n";
    var keys = Object.keys(records[0] || { text: "" });
    return [keys.join(",")].concat(records.map(function (r) {
      return keys.map(function (k) { return csvCell(r[k]); }).join(",");
    })).join("\n") + "\n";
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
          var pseudonymiser = null;
          resolve({
            name: name.replace(/(\.[^.]+)$/, ".perturbed$1"), kind: parsed.kind,
            originals: parsed.texts, outputs: outputs, rows: parsed.rows, columns: parsed.columns,
            textField: field,
            pseudonymiser: function () {  // one key per perturbed file, made on first use
              pseudonymiser = pseudonymiser || makePseudonymiser();
              return pseudonymiser;
            },
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
      showColumns(p);
      $("preview").hidden = false;
      $("ds-name").value = $("ds-name").value || file.name;
      $("upload").disabled = false;
      status("perturb-status", "done: " + p.originals.length + " records perturbed in this browser");
    }).catch(function (e) { status("perturb-status", e.message, true); });
  }

  function fillColumnChoice(select, columns, none) {
    select.innerHTML = "";
    [""].concat(columns).forEach(function (c) {
      var o = document.createElement("option");
      o.value = c; o.textContent = c || none;
      select.appendChild(o);
    });
  }

  function showColumns(p) {
    fillColumnChoice($("label-column"), p.columns, "(none: not uploaded)");
    fillColumnChoice($("user-column"), p.columns, "(none: not uploaded)");
    $("columns").hidden = !p.columns.length;
    return renderLeaving();
  }

  /* Say, and show, exactly what will leave the page. */
  function renderLeaving() {
    var p = state.perturbed;
    if (!p) return Promise.resolve();
    var labelCol = $("label-column").value, userCol = $("user-column").value;
    var parts = ["the perturbed '" + p.textField + "' text"];
    if (labelCol) parts.push("the '" + labelCol + "' column, in clear, as the label");
    if (userCol) parts.push("a keyed pseudonym of '" + userCol + "' (the key never leaves this page)");
    var dropped = p.columns.filter(function (c) { return c !== labelCol && c !== userCol; });
    $("leaves").textContent = "Leaves this page: " + parts.join("; ") + "." +
      (dropped.length ? " Dropped, never uploaded: " + dropped.join(", ") + "." : "");
    if (labelCol && labelCol === userCol) {
      status("upload-status", "choose different columns for the label and the user id", true);
      $("upload").disabled = true;
      return Promise.resolve();
    }
    return buildUpload(p, labelCol, userCol).then(function (records) {
      var head = $("preview-table").tHead.rows[0];
      head.innerHTML = "";
      ["original text (stays here)", "perturbed text (uploaded)"]
        .concat(labelCol ? ["label (uploaded)"] : [], userCol ? ["user pseudonym (uploaded)"] : [])
        .forEach(function (h) { var th = document.createElement("th"); th.textContent = h; head.appendChild(th); });
      var body = $("preview-table").tBodies[0];
      body.innerHTML = "";
      for (var i = 0; i < Math.min(5, records.length); i++) {
        var tr = body.insertRow();
        tr.insertCell().textContent = p.originals[i];
        tr.insertCell().textContent = records[i].text;
        if (labelCol) tr.insertCell().textContent = records[i].label;
        if (userCol) tr.insertCell().textContent = records[i].user_id;
      }
      $("upload").disabled = false;
      status("upload-status", "");
    }).catch(function (e) { $("upload").disabled = true; status("upload-status", e.message, true); });
  }

  function onUpload() {
    var p = state.perturbed;
    if (!p) return;
    $("upload").disabled = true;  // one click, one upload
    buildUpload(p, $("label-column").value, $("user-column").value).then(function (records) {
      return upload(p, serialise(p.kind, records));
    }).catch(function (e) { status("upload-status", e.message, true); $("upload").disabled = false; });
  }

  function upload(p, body) {
    var form = new FormData();
    form.append("file", new Blob([body], { type: "text/plain" }), p.name);
    form.append("name", $("ds-name").value);
    form.append("budget_epsilon", $("budget-epsilon").value);
    form.append("budget_delta", $("budget-delta").value);
    form.append("require_dp", $("require-dp").checked ? "true" : "false");
    form.append("perturbation", JSON.stringify({
      mechanism: p.mechanism, per_word: p.perWord, per_record: p.perRecord, per_file: p.perFile,
      where: "browser",
    }));
    status("upload-status", "uploading…");
    return api("/v1/datasets", { method: "POST", body: form }).then(function (ds) {
      status("upload-status", "stored as " + ds.id + " (" + ds.records + " records)");
      refresh();
    });
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
        tr.insertCell().textContent = j.guarantee.kind === "SDP"
          ? "selective DP (SDP) under '" + j.guarantee.policy + "'; not DP" : j.guarantee.kind;
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
  $("label-column").addEventListener("change", renderLeaving);
  $("user-column").addEventListener("change", renderLeaving);
  $("submit-job").addEventListener("click", onSubmitJob);
  setInterval(refresh, 2000);
  refresh();
})();
