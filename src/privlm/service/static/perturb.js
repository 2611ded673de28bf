/* privlm local text perturbation: the browser side of privlm.perturb.
 *
 * Each word's GloVe vector is clipped to norm C, noised, and mapped to the nearest
 * vocabulary word, here, before anything is uploaded. Randomness comes from
 * crypto.getRandomValues only, never a non-cryptographic generator. The arithmetic mirrors the Python
 * package step by step (uniforms.py, gaussian_calibration.py, mechanisms.py, text.py), and
 * both are checked against the same test vectors (privlm/perturb/testvectors.json).
 */
(function (root) {
  "use strict";
  var TWO_32 = 4294967296.0;
  var BISECTION_STEPS = 200;

  function cryptoWords(n) {
    var c = (typeof globalThis !== "undefined" && globalThis.crypto) || root.crypto;
    if (!c || !c.getRandomValues) throw new Error("no cryptographic RNG (crypto.getRandomValues) available");
    var out = new Uint32Array(n);
    for (var i = 0; i < n; i += 16384) c.getRandomValues(out.subarray(i, Math.min(n, i + 16384)));
    return out;
  }

  function uniformsFromWords(words) {
    var u = new Float64Array(words.length);
    for (var i = 0; i < words.length; i++) u[i] = (words[i] + 0.5) / TWO_32;
    return u;
  }

  function standardNormals(u) {
    if (u.length % 2) throw new Error("Box-Muller needs an even number of uniforms");
    var out = new Float64Array(u.length);
    for (var i = 0; i < u.length; i += 2) {
      var r = Math.sqrt(-2.0 * Math.log(u[i]));
      var t = 2.0 * Math.PI * u[i + 1];
      out[i] = r * Math.cos(t);
      out[i + 1] = r * Math.sin(t);
    }
    return out;
  }

  function gammaIntegerShape(u, scale) {
    var s = 0.0;
    for (var i = 0; i < u.length; i++) s += Math.log(u[i]);
    return -scale * s;
  }

  /* log Φ(x). erfc by its power series for |z| < 2.5 and by its continued fraction
   * (evaluated backwards, in log space) beyond, so deep tails keep full relative precision. */
  function erfcSeries(z) {
    // erf(z) = 2/√π e^{-z²} Σ 2^n z^{2n+1} / (1·3·…·(2n+1))
    var term = z, sum = z;
    for (var n = 1; n < 200; n++) {
      term *= (2.0 * z * z) / (2 * n + 1);
      sum += term;
      if (term < 1e-17 * sum) break;
    }
    return 1.0 - (2.0 / Math.sqrt(Math.PI)) * Math.exp(-z * z) * sum;
  }
  function logErfcCF(z) {
    // erfc(z) = e^{-z²}/√π · 1/(z + (1/2)/(z + (2/2)/(z + (3/2)/(z + …))))
    var f = z;
    for (var k = 120; k >= 1; k--) f = z + (k / 2.0) / f;
    return -z * z - 0.5 * Math.log(Math.PI) - Math.log(f);
  }
  function logPhi(x) {
    var z = -x / Math.SQRT2; // Φ(x) = erfc(z)/2
    if (z >= 2.5) return Math.log(0.5) + logErfcCF(z);
    if (z >= 0) return Math.log(0.5 * erfcSeries(z));
    if (z > -2.5) return Math.log(0.5 * (2.0 - erfcSeries(-z)));
    return Math.log1p(-0.5 * Math.exp(logErfcCF(-z)));
  }

  function gaussianDelta(eps, sigma, sens) {
    var a = sens / (2.0 * sigma), b = (eps * sigma) / sens;
    var l1 = logPhi(a - b), l2 = eps + logPhi(-a - b);
    if (l2 >= l1) return 0.0;
    return Math.exp(l1) * -Math.expm1(l2 - l1);
  }

  function checkEpsDelta(eps, delta) {
    if (!(isFinite(eps) && eps > 0)) throw new Error("ε must be a positive finite number");
    if (!(delta > 0 && delta < 1)) throw new Error("δ must lie strictly between 0 and 1");
  }

  function gaussianSigma(eps, delta, sens) {
    checkEpsDelta(eps, delta);
    var lo = 1e-6 * sens, hi = sens;
    while (gaussianDelta(eps, hi, sens) > delta) hi *= 2.0;
    for (var i = 0; i < BISECTION_STEPS; i++) {
      var mid = Math.sqrt(lo * hi);
      if (gaussianDelta(eps, mid, sens) > delta) lo = mid; else hi = mid;
      if (hi / lo - 1.0 < 1e-13) break;
    }
    return hi;
  }

  function gaussianEpsilon(sigma, sens, delta) {
    if (gaussianDelta(0.0, sigma, sens) <= delta) return 0.0;
    var lo = 0.0, hi = 1.0;
    while (gaussianDelta(hi, sigma, sens) > delta) { lo = hi; hi *= 2.0; }
    for (var i = 0; i < BISECTION_STEPS; i++) {
      var mid = 0.5 * (lo + hi);
      if (gaussianDelta(mid, sigma, sens) > delta) lo = mid; else hi = mid;
      if (hi - lo < 1e-12 * Math.max(1.0, hi)) break;
    }
    return hi;
  }

  function makeMechanism(name, eps, delta, clip) {
    if (!(isFinite(clip) && clip > 0)) throw new Error("the clipping norm C must be positive");
    if (name === "laplace") {
      if (!(isFinite(eps) && eps > 0)) throw new Error("ε must be a positive finite number");
      var em = eps / (2.0 * clip);
      return {
        name: name, clip: clip, metricEpsilon: em,
        uniformsPerWord: function (d) { return 2 * d; },
        noise: function (u, d) {
          var g = standardNormals(u.subarray(0, d)), n = 0.0, i;
          for (i = 0; i < d; i++) n += g[i] * g[i];
          n = Math.sqrt(n);
          var r = gammaIntegerShape(u.subarray(d, 2 * d), 1.0 / em);
          var out = new Float64Array(d);
          for (i = 0; i < d; i++) out[i] = r * (g[i] / n);
          return out;
        },
        wordGuarantee: function () {
          return { mechanism: "metric-DP multivariate Laplace (Feyisetan et al. 2020)",
                   metric_epsilon: em, epsilon: eps, delta: 0.0, clip: clip };
        },
        documentGuarantee: function (words) { return { epsilon: words * eps, delta: 0.0, words: words }; },
      };
    }
    if (name === "gaussian") {
      checkEpsDelta(eps, delta);
      var sens = 2.0 * clip, sigma = gaussianSigma(eps, delta, sens);
      return {
        name: name, clip: clip, sigma: sigma,
        uniformsPerWord: function (d) { return d + (d % 2); },
        noise: function (u, d) {
          var g = standardNormals(u.subarray(0, d + (d % 2))), out = new Float64Array(d);
          for (var i = 0; i < d; i++) out[i] = sigma * g[i];
          return out;
        },
        wordGuarantee: function () {
          return { mechanism: "Gaussian (analytic calibration, Balle & Wang 2018)",
                   epsilon: eps, delta: delta, sigma: sigma, clip: clip };
        },
        documentGuarantee: function (words) {
          if (words === 0) return { epsilon: 0.0, delta: 0.0, words: 0 };
          return { epsilon: gaussianEpsilon(sigma, sens * Math.sqrt(words), delta), delta: delta, words: words };
        },
      };
    }
    throw new Error("unknown mechanism " + name + "; choose laplace or gaussian");
  }

  /* vocab: {words: [...], dim: d, vectors: Float32Array (n·d), clipped to norm C} */
  function makeVocabulary(words, vectors, dim) {
    var index = new Map();
    for (var i = 0; i < words.length; i++) if (!index.has(words[i])) index.set(words[i], i);
    return { words: words, vectors: vectors, dim: dim, index: index };
  }

  function embed(vocab, word) {
    var out = new Float64Array(vocab.dim), i = vocab.index.get(word.toLowerCase());
    if (i === undefined) return out; // unknown words: the zero vector (see vocabulary.py)
    for (var k = 0; k < vocab.dim; k++) out[k] = vocab.vectors[i * vocab.dim + k];
    return out;
  }

  function clipRow(v, clip) {
    var n = 0.0, i;
    for (i = 0; i < v.length; i++) n += v[i] * v[i];
    n = Math.sqrt(n);
    var s = Math.min(1.0, clip / Math.max(n, 1e-300));
    var out = new Float64Array(v.length);
    for (i = 0; i < v.length; i++) out[i] = v[i] * s;
    return out;
  }

  function nearest(vocab, x) {
    var d = vocab.dim, best = -1, bestD = Infinity, V = vocab.vectors;
    for (var j = 0; j < vocab.words.length; j++) {
      var s = 0.0, o = j * d;
      for (var k = 0; k < d; k++) { var t = V[o + k] - x[k]; s += t * t; }
      if (s < bestD) { bestD = s; best = j; }
    }
    return best;
  }

  var TOKEN = /[\p{L}\p{N}]+|\S/gu;
  function tokenize(text) { return text.match(TOKEN) || []; }

  function perturbWords(words, vocab, mech, uniforms) {
    var d = vocab.dim, k = mech.uniformsPerWord(d), out = [];
    if (!words.length) return out;
    var u = uniforms(k * words.length);
    for (var i = 0; i < words.length; i++) {
      var v = clipRow(embed(vocab, words[i]), mech.clip);
      var z = mech.noise(u.subarray(i * k, (i + 1) * k), d);
      for (var j = 0; j < d; j++) v[j] += z[j];
      out.push(vocab.words[nearest(vocab, v)]);
    }
    return out;
  }

  function cryptoUniforms(n) { return uniformsFromWords(cryptoWords(n)); }

  function perturbText(text, vocab, mech, uniforms) {
    uniforms = uniforms || cryptoUniforms;
    var lines = text.split(/\r\n|\n/); // records are split at these only (the server's loader)
    if (lines.length && lines[lines.length - 1] === "") lines.pop();
    var tokens = lines.map(tokenize), flat = [].concat.apply([], tokens);
    var out = perturbWords(flat, vocab, mech, uniforms), p = 0;
    var text2 = tokens.map(function (t) { return t.map(function () { return out[p++]; }).join(" "); }).join("\n");
    var longest = tokens.reduce(function (m, t) { return Math.max(m, t.length); }, 0);
    return {
      text: text2, words: flat.length,
      per_word: mech.wordGuarantee(),
      per_document: mech.documentGuarantee(flat.length),
      per_line_max: mech.documentGuarantee(longest),
    };
  }

  /* The share of words that come through unchanged at ε per word, interpolated linearly
   * between points measured on public text ([{epsilon, share_unchanged}], ascending; GET
   * /v1/defaults): privlm.perturb.readability.share_unchanged, which a test compares. */
  function shareUnchanged(points, eps) {
    if (eps <= points[0].epsilon) return points[0].share_unchanged * eps / points[0].epsilon;
    for (var i = 1; i < points.length; i++) {
      if (eps <= points[i].epsilon) {
        var a = points[i - 1], b = points[i];
        return a.share_unchanged + (b.share_unchanged - a.share_unchanged) *
          (eps - a.epsilon) / (b.epsilon - a.epsilon);
      }
    }
    return points[points.length - 1].share_unchanged;
  }

  var api = {
    shareUnchanged: shareUnchanged, uniformsFromWords: uniformsFromWords, standardNormals: standardNormals,
    gammaIntegerShape: gammaIntegerShape, logPhi: logPhi, gaussianDelta: gaussianDelta,
    gaussianSigma: gaussianSigma, gaussianEpsilon: gaussianEpsilon, makeMechanism: makeMechanism,
    makeVocabulary: makeVocabulary, tokenize: tokenize, perturbText: perturbText,
    cryptoUniforms: cryptoUniforms, nearest: nearest, clipRow: clipRow, embed: embed,
  };
  if (typeof module !== "undefined" && module.exports) module.exports = api;
  else root.PrivlmPerturb = api;
})(typeof self !== "undefined" ? self : this);
