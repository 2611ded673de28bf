// Runs perturb.js on the shared test vectors: node run_vectors.js perturb.js vectors.json vocab.json
"use strict";
const fs = require("fs");
const P = require(process.argv[2]);
const spec = JSON.parse(fs.readFileSync(process.argv[3], "utf8"));
const voc = JSON.parse(fs.readFileSync(process.argv[4], "utf8"));
const vocab = P.makeVocabulary(voc.words, Float32Array.from(voc.vectors), voc.dim);
const out = { cases: [], calibration: [] };
for (const c of spec.cases) {
  const m = c.mechanism;
  const mech = P.makeMechanism(m.name, m.epsilon, m.delta, spec.clip);
  const words = Uint32Array.from(c.random_words);
  let used = 0;
  const uniforms = (n) => {
    if (used + n > words.length) throw new Error("too few random words");
    const u = P.uniformsFromWords(words.subarray(used, used + n));
    used += n;
    return u;
  };
  const r = P.perturbText(c.text, vocab, mech, uniforms);
  out.cases.push({
    tokens: c.text.split("\n").map(P.tokenize), perturbed: r.text, words: r.words,
    per_word: r.per_word, per_document: r.per_document, per_line_max: r.per_line_max,
  });
}
for (const k of spec.calibration) {
  const sigma = P.gaussianSigma(k.epsilon, k.delta, k.sensitivity);
  out.calibration.push({
    sigma, epsilon_back: P.gaussianEpsilon(sigma, k.sensitivity, k.delta),
    epsilon_of_4: P.gaussianEpsilon(sigma, 2 * k.sensitivity, k.delta),
  });
}
process.stdout.write(JSON.stringify(out));
