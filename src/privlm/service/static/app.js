/* The privlm page: perturb a file locally (perturb.js), upload only the perturbed text,
 * start and cancel jobs, download artefacts, deploy, and try private completions. */
(function () {
  "use strict";
  var P = window.PrivlmPerturb;
  var $ = function (id) { return document.getElementById(id); };
  var state = { key: sessionStorage.getItem("privlm-key") || "", perturbed: null, vocab: {},
                // what the user just made, selected as soon as it is listed; then what they chose
                want: {}, datasets: {}, jobs: {}, deployments: {},
                mechanisms: [] };  // GET /v1/mechanisms: what each can serve, and its fields

  function api(path, opts) {
    opts = opts || {};
    opts.headers = Object.assign({ Authorization: "Bearer " + state.key }, opts.headers || {});
    return fetch(path, opts).then(function (r) {
      return r.json().then(function (body) {
        if (!r.ok) {
          var e = new Error((body.error && body.error.message) || r.statusText);
          e.status = r.status;
          throw e;
        }
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
      showWarnings(p);
      $("guarantee").hidden = false;
      showColumns(p);
      $("preview").hidden = false;
      $("ds-name").value = $("ds-name").value || file.name;
      $("upload").disabled = false;
      status("perturb-status", "done: " + p.originals.length + " records perturbed in this browser");
    }).catch(function (e) { status("perturb-status", e.message, true); });
  }

  /* The share of words that come through unchanged at ε per word (perturb.js). */
  function shareUnchanged(mech, eps) {
    var d = state.perturbDefaults && state.perturbDefaults[mech];
    return d ? P.shareUnchanged(d.measured, eps) : null;
  }

  /* The trade-off beside ε: how much of a text stays readable there (public figures). */
  function describeTradeoff() {
    var mech = $("mechanism").value, eps = parseFloat($("epsilon").value);
    var share = shareUnchanged(mech, eps);
    $("eps-tradeoff").textContent = share === null || !(eps > 0) ? "" :
      "At ε = " + eps + " about " + Math.round(100 * share) + " % of words come through " +
      "unchanged (measured on public English text, never on yours).";
  }

  /* Plain-words warnings at the ends of the trade-off, where a setting buys little. */
  function showWarnings(p) {
    var list = $("warnings"), out = [];
    list.innerHTML = "";
    var d = state.perturbDefaults && state.perturbDefaults[p.mechanism];
    var share = shareUnchanged(p.mechanism, p.perWord.epsilon);
    if (d && share <= d.few_share) {
      out.push("At ε = " + (+p.perWord.epsilon).toPrecision(3) + " per word about " +
        Math.round(100 * share) + " % of words come through: the text reads as unrelated " +
        "words and will train a model poorly, while a record's ε (" +
        (+p.perRecord.epsilon).toPrecision(3) + ") still promises little. Raise ε towards " +
        "the default (" + d.epsilon + "), and count on the DP training for each record.");
    } else if (d && share >= d.most_share) {
      out.push("At ε = " + (+p.perWord.epsilon).toPrecision(3) + " per word about " +
        Math.round(100 * share) + " % of words come through unchanged, names included: " +
        "this step hides next to nothing. Lower ε, or do not count on it to hide names.");
    }
    if (p.perRecord.epsilon <= 10 && p.perFile.epsilon > 10) {
      out.push("For the whole file, ε = " + (+p.perFile.epsilon).toPrecision(4) + ": the file " +
        "as a whole is not protected by the perturbation; each record is (ε above).");
    }
    out.forEach(function (text) {
      var li = document.createElement("li"); li.textContent = text; list.appendChild(li);
    });
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
      $("upload").disabled = state.uploaded === p;  // a file is uploaded once
      if (state.uploaded !== p) status("upload-status", "");
    }).catch(function (e) { $("upload").disabled = true; status("upload-status", e.message, true); });
  }

  /* The budget typed in; "" sends none, and the server answers with the default it applied
   * (the same as an API upload without one). */
  function budgetEpsilon() {
    var raw = $("budget-epsilon").value.trim(), eps = Number(raw);
    if (raw !== "" && (!isFinite(eps) || eps <= 0)) {
      throw new Error("the dataset's budget ε must be a number above 0, or empty for the default (nothing was uploaded)");
    }
    return raw;
  }

  function onUpload() {
    var p = state.perturbed;
    if (!p || state.uploaded === p) return;
    try { budgetEpsilon(); } catch (e) { status("upload-status", e.message, true); return; }
    $("upload").disabled = true;  // one click, one upload
    buildUpload(p, $("label-column").value, $("user-column").value).then(function (records) {
      return upload(p, serialise(p.kind, records));
    }).catch(function (e) { status("upload-status", e.message, true); $("upload").disabled = false; });
  }

  function upload(p, body) {
    var form = new FormData();
    // only the dataset name typed above leaves the page, never the file's own name
    form.append("file", new Blob([body], { type: "text/plain" }), "upload." + p.kind);
    form.append("name", $("ds-name").value);
    var eps = budgetEpsilon();
    if (eps !== "") form.append("budget_epsilon", eps);
    if ($("budget-delta").value.trim() !== "") form.append("budget_delta", $("budget-delta").value);
    form.append("require_dp", $("require-dp").checked ? "true" : "false");
    form.append("public", $("public-data").checked ? "true" : "false");
    form.append("perturbation", JSON.stringify({
      mechanism: p.mechanism, per_word: p.perWord, per_record: p.perRecord, per_file: p.perFile,
      where: "browser",
    }));
    status("upload-status", "uploading…");
    return api("/v1/datasets", { method: "POST", body: form }).then(function (ds) {
      state.uploaded = p;  // stays disabled until another file is perturbed
      state.want.dataset = ds.id;
      status("upload-status", "stored as " + ds.id + " (" + ds.records + " records)" +
        (ds.budget_note ? "; " + ds.budget_note : ""));
      refresh();
    });
  }

  function num(x, digits) { return x === null || x === undefined ? "–" : (+x).toPrecision(digits || 4); }

  function option(select, value, text) {
    var o = document.createElement("option"); o.value = value; o.textContent = text;
    select.appendChild(o); return o;
  }

  function button(text, onClick) {
    var b = document.createElement("button"); b.textContent = text;
    b.addEventListener("click", onClick); return b;
  }

  function seconds(s) {
    if (s === null || s === undefined) return "";
    return s < 90 ? Math.round(s) + " s" : Math.round(s / 60) + " min";
  }

  function refresh() {
    if (!state.key) return;
    api("/v1/datasets").then(renderDatasets).catch(function () {});
    api("/v1/jobs").then(renderJobs).catch(function () {});
    api("/v1/deployments").then(renderDeployments).catch(function () {});
  }

  /* The select's choice after a refresh: what the user just made (once it is listed), else
   * what they had chosen, else the newest (options are listed newest first). */
  function choose(sel, kind, keep) {
    var has = function (v) { return Array.prototype.some.call(sel.options, function (o) { return o.value === v; }); };
    var want = state.want[kind];
    if (want && has(want)) { sel.value = want; delete state.want[kind]; }
    else if (keep && has(keep)) sel.value = keep;
    else if (sel.options.length) sel.selectedIndex = 0;
    describeTargets();
  }

  function newest(sel) { return sel.options.length ? sel.options[0].value : null; }

  /* Next to each submit button: exactly what it acts on and what it will spend. */
  function describeTargets() {
    var d = state.datasets[$("job-dataset").value], kind = $("job-kind").value;
    $("job-target").textContent = !d ? "" : "trains on " + d.name + " (" + d.records + " records); " +
      (kind === "ensemble" ? "spends nothing now: each deployment of it reserves its own ε"
        : "spends up to ε " + $("job-epsilon").value + " of its " + num(d.budget.remaining ? d.budget.remaining.epsilon : d.budget.epsilon) + " left");
    var jsel = $("dep-job"), opt = jsel.options[jsel.selectedIndex];
    var waiting = opt && opt.dataset.status !== "succeeded";
    $("deploy").disabled = !opt || waiting;
    var m = chosenMechanism(), eps = $("dep-field-epsilon");
    $("dep-target").textContent = !opt || !m ? "" : waiting
      ? "waiting for job " + opt.value + ", " + opt.dataset.progress + ": Deploy serves it once it has succeeded"
      : "serves job " + opt.value + " with " + m.name + "; " +
      (!m.charges_tokens ? "costs nothing more (its answers are post-processing of the trained model)"
        : "reserves " + (eps ? "ε " + eps.value + " (" + m.relation + ")" : "its whole cost (" + m.relation + ")") +
          " of its dataset's budget now");
    var dep = state.deployments[$("play-deployment").value];
    $("play-target").textContent = !dep ? "" : "completes with " + dep.id + " (" + dep.mechanism + ")";
  }

  /* Acting on an object that is not the newest of its kind asks once. */
  function confirmOlder(sel, what) {
    return sel.value === newest(sel) ||
      window.confirm("The selected " + what + " (" + sel.value + ") is not your most recent one (" + newest(sel) + "). Use it anyway?");
  }

  function renderDatasets(r) {
    var sel = $("job-dataset"), keep = sel.value, body = $("datasets").tBodies[0];
    sel.innerHTML = ""; body.innerHTML = ""; state.datasets = {};
    r.data.slice().reverse().forEach(function (d) {
      state.datasets[d.id] = d;
      var tr = body.insertRow(), b = d.budget;
      tr.insertCell().textContent = d.name + " (" + d.id + ")";
      tr.insertCell().textContent = d.records;
      if (d.kind === "public") {  // no budget: never trained on privately
        tr.insertCell().textContent = "public: no budget (may be released verbatim)";
        tr.insertCell().textContent = "–"; tr.insertCell().textContent = "–";
        return;
      }
      option(sel, d.id, d.name + " (" + d.records + " records)");
      tr.insertCell().textContent = num(b.epsilon) + " at δ " + b.delta;
      tr.insertCell().textContent = b.spent ? spentText(b) : "–";
      tr.insertCell().textContent = b.remaining ? num(b.remaining.epsilon) : "–";
    });
    choose(sel, "dataset", keep);
  }

  /* JFT's charges are selective DP under a policy, not DP: shown apart from DP spending. */
  function spentText(b) {
    var g = b.spent_by_guarantee;
    if (!g || !g.SDP.epsilon) return num(b.spent.epsilon);
    return num(b.spent.epsilon) + " (DP " + num(g.DP.epsilon) + "; JFT, selective DP only, not DP: " +
      num(g.SDP.epsilon) + ")";
  }

  function progressCell(cell, j) {
    var bar = document.createElement("span"), fill = document.createElement("span"), p = j.progress;
    bar.className = "bar"; fill.style.width = p.percent + "%"; bar.appendChild(fill);
    cell.appendChild(bar);
    var text = " " + p.percent.toFixed(0) + "%";
    if (p.steps_total) text += " (" + p.steps_done + " of " + p.steps_total + " steps)";
    if (p.elapsed_s !== null) text += ", " + seconds(p.elapsed_s) + " elapsed";
    if (p.eta_s !== null) text += ", about " + seconds(p.eta_s) + " left";
    cell.appendChild(document.createTextNode(text + (p.stage ? " · " + p.stage : "")));
  }

  function ordinal(n) {
    var s = ["th", "st", "nd", "rd"], v = n % 100;
    return n + (s[(v - 20) % 10] || s[v] || s[0]);
  }

  /* "queued (2nd in line)", "running, 40%", "running (cancelling)", "succeeded". */
  function jobState(j) {
    if (j.status === "queued") return "queued" + (j.queue_position ? " (" + ordinal(j.queue_position) + " in line)" : "");
    if (j.status === "running") return "running, " + j.progress.percent.toFixed(0) + "%" + (j.cancel_requested ? " (cancelling)" : "");
    return j.status;
  }

  /* The jobs, newest first: the id of the newest (a row's button on an older one asks). */
  var newestJob = null;
  function confirmOlderJob(id) {
    return id === newestJob ||
      window.confirm("Job " + id + " is not your most recent one (" + newestJob + "). Act on it anyway?");
  }

  function renderJobs(r) {
    var body = $("jobs").tBodies[0], sel = $("dep-job"), keep = sel.value;
    body.innerHTML = ""; sel.innerHTML = "";
    newestJob = r.data.length ? r.data[r.data.length - 1].id : null;
    r.data.slice().reverse().forEach(function (j) {
      var tr = body.insertRow();
      tr.id = "job-" + j.id;
      tr.insertCell().textContent = j.id;
      tr.insertCell().textContent = j.kind;
      tr.insertCell().textContent = jobState(j) + (j.error ? ": " + j.error : "");
      progressCell(tr.insertCell(), j);
      tr.insertCell().textContent = num(j.epsilon.spent);
      tr.insertCell().textContent = j.guarantee.kind === "SDP"
        ? "selective DP (SDP) under '" + j.guarantee.policy + "'; not DP" : j.guarantee.kind;
      var actions = tr.insertCell();
      if (j.status === "queued" || j.status === "running") {
        actions.appendChild(button("Cancel", function () { if (confirmOlderJob(j.id)) cancelJob(j.id); }));
      }
      if (j.status === "succeeded" && j.kind !== "ensemble") {
        actions.appendChild(button("Download", function () { if (confirmOlderJob(j.id)) download(j.id); }));
      }
      if (j.status === "succeeded" && j.kind === "synth") {
        actions.appendChild(button("Save as public dataset", function () { if (confirmOlderJob(j.id)) saveAsDataset(j.id); }));
        actions.appendChild(button("Curator report", function () { curatorReport(j.id); }));
      }
      var live = j.status === "queued" || j.status === "running" || j.status === "succeeded";
      if (live && j.kind !== "pate" && j.kind !== "prompt-dpsgd" && j.kind !== "synth") {
        var serves = j.kind === "ensemble" ? j.params.protocol : "adapter";
        var o = option(sel, j.id, j.id + " (" + j.kind + (serves === "adapter" ? ", one adapter" : ", a " + serves + " ensemble") + ")" +
          (j.status === "succeeded" ? "" : ", " + jobState(j)));
        o.dataset.serves = serves; o.dataset.status = j.status; o.dataset.progress = jobState(j);
      }
    });
    choose(sel, "job", keep);
    renderMechanisms();
  }

  /* The budget is read for the deployment chosen in the playground only: reading one loads
   * the deployment on the server, which the page should not do for every row every 2 s. */
  function renderDeployments(r) {
    var body = $("deployments").tBodies[0], sel = $("play-deployment"), keep = sel.value;
    body.innerHTML = ""; sel.innerHTML = ""; state.deployments = {};
    var cells = {};
    r.data.slice().reverse().forEach(function (d) {
      state.deployments[d.id] = d;
      var tr = body.insertRow();
      tr.insertCell().textContent = d.id;
      tr.insertCell().textContent = d.mechanism;
      tr.insertCell().textContent = d.guarantee.text;
      cells[d.id] = tr.insertCell();
      cells[d.id].textContent = "choose it in the playground to see";
      option(sel, d.id, d.id + " (" + d.mechanism + ")");
    });
    choose(sel, "deployment", keep);
    if (sel.value && cells[sel.value]) {
      api("/v1/deployments/" + sel.value + "/budget")
        .then(function (b) { cells[sel.value].textContent = budgetText(b) + "." + growthText(b); }).catch(function () {});
    }
  }

  function budgetText(b) {
    if (b.per_token_cost === 0) return "free: its tokens are post-processing of a DP release";
    if (b.spent.rdp_epsilon !== undefined) {
      return "RDP ε " + num(b.spent.rdp_epsilon) + " spent of " + num(b.budget.rdp_epsilon) +
        " per part (order " + b.budget.order + ")" + (b.exhausted ? "; spent (STOP)" : "");
    }
    return "ε " + num(b.spent.epsilon) + " spent of " + num(b.budget.epsilon) + "; " +
      b.queries.left + " of " + b.queries.total + " private tokens left";
  }

  /* Why ε grew so much with the first tokens: said once, after the figures. */
  function growthText(b) {
    if (!b.growth || !(b.queries.used > 0) || !(b.queries.left > 0)) return "";
    return " ε grows fast at first: the first token alone shows ε " +
      num(b.growth.first_token_epsilon) + " (converting Rényi DP to (ε, δ) costs about " +
      "log(1/δ)/(α−1) once), each later token adds about " + num(b.growth.later_token_epsilon) + ".";
  }

  function cancelJob(id) {
    api("/v1/jobs/" + id + "/cancel", { method: "POST" })
      .then(function (j) { status("job-status", j.status === "cancelled" ? "cancelled " + id : "cancelling " + id + ": it stops at its next step"); refresh(); })
      .catch(function (e) { status("job-status", e.message, true); });
  }

  /* A synth job's texts are DP: saved as a public dataset, any job may use them freely. */
  function saveAsDataset(id) {
    api("/v1/jobs/" + id + "/dataset", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({}),
    }).then(function (d) { status("job-status", "saved " + id + "'s texts as public dataset " + d.id); refresh(); })
      .catch(function (e) { status("job-status", e.message, true); });
  }

  /* A synth job's overlap report: computed on the records, so for the owner's eyes only
   * (not DP); shown here, never part of the download. */
  function curatorReport(id) {
    api("/v1/jobs/" + id + "/curator-report").then(function (r) {
      var o = r.not_private_for_the_curator.overlap, s = o ? o.summary : null;
      status("job-status", !s ? r.note : "Not DP, for you only: " + id + "'s texts share at most " +
        s.longest_run_words_max + " words in a row with a record; " + s.exact_copies + " exact and " +
        s.near_copies + " near copies" + (s.texts_with_pii_also_in_records === undefined ? "" :
        "; " + s.texts_with_pii_also_in_records + " texts with PII also in the records") + ".");
    }).catch(function (e) { status("job-status", e.message, true); });
  }

  function download(id) {
    fetch("/v1/jobs/" + id + "/artifact", { headers: { Authorization: "Bearer " + state.key } })
      .then(function (r) {
        if (!r.ok) return r.json().then(function (b) { throw new Error(b.error.message); });
        return r.blob();
      }).then(function (blob) {
        var a = document.createElement("a");
        a.href = URL.createObjectURL(blob); a.download = id + ".zip";
        document.body.appendChild(a); a.click(); a.remove();
        status("job-status", "downloaded " + id + ".zip");
      }).catch(function (e) { status("job-status", e.message, true); });
  }

  function onSubmitJob() {
    var kind = $("job-kind").value, params = {};
    if (kind === "ensemble") params.parts = parseInt($("job-parts").value, 10);
    else {
      var raw = $("job-epsilon").value.trim();
      if (raw === "" || !(Number(raw) > 0)) { status("job-status", "enter the job's target ε, a number above 0", true); return; }
      params.epsilon = Number(raw);
    }
    if (kind === "synth") {
      params.count = parseInt($("job-count").value, 10);
      params.generator = $("job-generator").value;
      params.scrub = $("job-scrub").value;
      var labels = $("job-labels").value.split(",").map(function (x) { return x.trim(); })
        .filter(function (x) { return x; });
      if (labels.length) params.labels = labels;
    }
    if (!$("job-dataset").value) { status("job-status", "upload a dataset first", true); return; }
    if (!confirmOlder($("job-dataset"), "dataset")) return;
    api("/v1/jobs", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ kind: kind, dataset_id: $("job-dataset").value, params: params }),
    }).then(function (j) { state.want.job = j.id; status("job-status", "queued " + j.id); refresh(); })
      .catch(function (e) { status("job-status", e.message, true); });
  }

  /* The mechanisms that can serve the selected job (by what it made: an ensemble's
   * protocol, or one adapter), from GET /v1/mechanisms; the chosen one's fields. */
  function chosenMechanism() {
    var name = $("dep-mechanism").value;
    return state.mechanisms.filter(function (m) { return m.name === name; })[0] || null;
  }

  function renderMechanisms() {
    var jsel = $("dep-job"), opt = jsel.options[jsel.selectedIndex], sel = $("dep-mechanism");
    var serves = opt ? opt.dataset.serves : null, keep = sel.value;
    var fitting = state.mechanisms.filter(function (m) { return m.serves === serves; });
    var names = fitting.map(function (m) { return m.name; }).join(",");
    if (sel.dataset.names !== names) {  // rebuilt only when the choice changes
      sel.innerHTML = ""; sel.dataset.names = names;
      fitting.forEach(function (m) { option(sel, m.name, m.name); });
      if (keep && fitting.some(function (m) { return m.name === keep; })) sel.value = keep;
      renderFields();
    }
  }

  /* One input per field of the chosen mechanism, its default, bounds and help from the
   * server (the mechanism's config class); nothing restated here. */
  function renderFields() {
    var m = chosenMechanism(), box = $("dep-fields");
    box.innerHTML = "";
    $("dep-summary").textContent = m ? m.summary : "";
    if (!m) { describeTargets(); return; }
    m.fields.forEach(function (f) {
      var label = document.createElement("label"), input;
      label.id = "dep-field-" + f.name + "-label";
      label.appendChild(document.createTextNode(f.name + " "));
      if (f.choices) {
        input = document.createElement("select");
        f.choices.forEach(function (c) { option(input, c, c); });
        input.value = f.default;
      } else {
        input = document.createElement("input");
        input.type = f.type === "str" ? "text" : "number";
        input.step = f.type === "int" ? "1" : "any";
        input.value = f.default === null ? "" : f.default;
      }
      input.id = "dep-field-" + f.name;
      input.dataset.type = f.type;
      input.addEventListener("input", describeTargets);
      label.appendChild(input);
      var help = document.createElement("small"); help.textContent = f.help;
      label.appendChild(help);
      box.appendChild(label);
    });
    describeTargets();
  }

  function fieldValues(m) {
    var out = {};
    for (var i = 0; i < m.fields.length; i++) {
      var f = m.fields[i], raw = $("dep-field-" + f.name).value.trim();
      if (raw === "") continue;  // the mechanism's own default (or derived)
      if (f.type === "str") out[f.name] = raw;
      else {
        var n = Number(raw);
        if (!isFinite(n)) throw new Error(f.name + " must be a number");
        out[f.name] = f.type === "int" ? Math.round(n) : n;
      }
    }
    return out;
  }

  function onDeploy() {
    var sel = $("dep-job"), chosen = sel.options[sel.selectedIndex], m = chosenMechanism();
    if (!chosen) { status("deploy-status", "no job to deploy yet", true); return; }
    if (chosen.dataset.status !== "succeeded") {  // never another job in its place
      status("deploy-status", "job " + chosen.value + " has not finished yet: Deploy serves it once it has succeeded", true);
      return;
    }
    if (!m) { status("deploy-status", "no mechanism serves this job", true); return; }
    if (!confirmOlder(sel, "job")) return;
    var body;
    try { body = Object.assign({ job_id: chosen.value, mechanism: m.name }, fieldValues(m)); }
    catch (e) { status("deploy-status", e.message, true); return; }
    api("/v1/deployments", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    }).then(function (d) { state.want.deployment = d.id; status("deploy-status", "deployed " + d.id); refresh(); })
      .catch(function (e) { status("deploy-status", e.message, true); });
  }

  function onPlay() {
    var dep = $("play-deployment").value;
    if (!dep) { status("play-status", "deploy a job first", true); return; }
    if (!confirmOlder($("play-deployment"), "deployment")) return;
    var before;
    status("play-status", "generating…");
    api("/v1/deployments/" + dep + "/budget").then(function (b) {
      before = b;
      return api("/v1/completions", {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ model: dep, prompt: $("play-prompt").value,
                               max_tokens: parseInt($("play-tokens").value, 10) }),
      });
    }).then(function (c) {
      $("play-output").textContent = $("play-prompt").value + c.choices[0].text;
      status("play-status", c.usage.completion_tokens + " tokens (" + c.privlm.private_tokens +
        " private" + (c.privlm.fallback ? ", from the public model: budget spent" : "") + ")");
      return api("/v1/deployments/" + dep + "/budget");
    }).then(function (after) {
      $("play-budget").textContent = "Budget before: " + budgetText(before) + ". After: " +
        budgetText(after) + "." + growthText(after);
      refresh();
    }).catch(function (e) { status("play-status", e.message, true); });
  }

  $("api-key").value = state.key;
  $("save-key").addEventListener("click", function () {
    state.key = $("api-key").value.trim();
    sessionStorage.setItem("privlm-key", state.key);
    if (!state.key) { status("key-status", "enter an API key", true); return; }
    status("key-status", "checking…");
    api("/v1/datasets").then(function () {
      status("key-status", "key accepted"); $("key-status").className = "ok"; refresh();
    }).catch(function (e) {
      status("key-status", e.status === 401 ? "this key is not valid (unknown or revoked): " +
        "check it, or ask for a new one" : "could not check the key: " + e.message, true);
    });
  });
  $("mechanism").addEventListener("change", function () {
    var mech = $("mechanism").value, d = state.perturbDefaults;
    $("delta-label").hidden = mech !== "gaussian";
    // a default ε follows the mechanism; a value the user typed stays
    if (d && [d.laplace.epsilon, d.gaussian.epsilon].indexOf(+$("epsilon").value) >= 0) {
      $("epsilon").value = d[mech].epsilon;
    }
    describeTradeoff();
  });
  $("epsilon").addEventListener("input", describeTradeoff);
  $("file").addEventListener("change", function () { $("perturb").disabled = !$("file").files.length; $("upload").disabled = true; });
  $("perturb").addEventListener("click", onPerturb);
  $("upload").addEventListener("click", onUpload);
  $("label-column").addEventListener("change", renderLeaving);
  $("user-column").addEventListener("change", renderLeaving);
  $("submit-job").addEventListener("click", onSubmitJob);
  $("job-kind").addEventListener("change", function () {
    var ensemble = $("job-kind").value === "ensemble";
    var synth = $("job-kind").value === "synth";
    $("job-epsilon-label").hidden = ensemble; $("job-parts-label").hidden = !ensemble;
    $("job-count-label").hidden = !synth; $("job-labels-label").hidden = !synth;
    $("job-generator-label").hidden = !synth; $("job-scrub-label").hidden = !synth;
  });
  $("deploy").addEventListener("click", onDeploy);
  ["job-dataset", "job-kind", "job-epsilon", "play-deployment"]
    .forEach(function (id) { $(id).addEventListener("input", describeTargets); $(id).addEventListener("change", describeTargets); });
  $("dep-job").addEventListener("change", renderMechanisms);
  $("dep-mechanism").addEventListener("change", renderFields);
  fetch("/v1/mechanisms").then(function (r) { return r.json(); }).then(function (b) {
    state.mechanisms = b.data; renderMechanisms();
  }).catch(function () {});
  $("play").addEventListener("click", onPlay);
  $("play-deployment").addEventListener("change", refresh);
  // the forms' defaults come from the server's config classes, never restated here
  fetch("/v1/defaults").then(function (r) { return r.json(); }).then(function (d) {
    if (!$("budget-epsilon").value) $("budget-epsilon").value = d.dataset_budget.epsilon;
    if (!$("budget-delta").value) $("budget-delta").value = d.dataset_budget.delta;
    state.perturbDefaults = d.perturbation;
    if (!$("epsilon").value) $("epsilon").value = d.perturbation[$("mechanism").value].epsilon;
    if (!$("delta").value) $("delta").value = d.perturbation.gaussian.delta;
    describeTradeoff();
  }).catch(function () {});
  setInterval(refresh, 2000);
  refresh();
})();
