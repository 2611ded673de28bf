// The page's share of unchanged words: node run_share.js perturb.js queries.json
"use strict";
const fs = require("fs");
const P = require(process.argv[2]);
const spec = JSON.parse(fs.readFileSync(process.argv[3], "utf8"));
const out = spec.queries.map(([mech, eps]) => P.shareUnchanged(spec.points[mech], eps));
process.stdout.write(JSON.stringify(out));
