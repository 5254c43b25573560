// Loads the addon (build/tether.node, made by build.sh), or the one named by
// TETHER_NODE_ADDON. Nothing else here: policy lives in index.mjs.
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import path from "node:path";

const require = createRequire(import.meta.url);
const here = path.dirname(fileURLToPath(import.meta.url));
const file = process.env.TETHER_NODE_ADDON || path.join(here, "..", "build", "tether.node");

let addon;
try {
  addon = require(file);
} catch (e) {
  const err = new Error(
    `@tether/node: cannot load the addon ${file} (${e.message}); build it with node/build.sh ` +
      `(see node/README.md)`,
  );
  err.code = "UNAVAILABLE";
  err.cause = e;
  throw err;
}
export default addon;
