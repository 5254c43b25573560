// How the examples get a sandbox handle, the one place they differ from
// seed 000 (which assumes a handle already exists):
//   node example.js                       this machine (tether.local())
//   node example.js command "ssh -T host"  any command channel
//   node example.js e2b '{"sandbox":"..."}' a provider by name, its CLI flags as options
import * as tether from "@tether/node";

export function sandboxFromArgs(argv: string[] = process.argv.slice(2)): tether.Sandbox {
  const [provider = "local", options] = argv;
  if (provider === "local") return tether.local();
  if (provider === "command") return tether.command(options ?? "");
  return tether.connect(provider, options ? JSON.parse(options) : {});
}
