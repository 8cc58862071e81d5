// After install: each command in bin/ becomes a symbolic link to this platform's binary, so the
// command npm put on PATH is the binary itself, with no Node process in front of every call.
// The binary is checked first (`--version`); if anything fails, the bin/ launchers stay, and
// they work (through Node). The binary finds prose-state-mcp and prose-state-serve next to its
// own real path, in the platform package.
"use strict";
const { execFileSync } = require("child_process");
const fs = require("fs");
const path = require("path");

const pkg = `prose-state-${process.platform}-${process.arch}`;
let dir;
try {
  dir = path.dirname(require.resolve(`${pkg}/package.json`));
} catch {
  process.stderr.write(`prose-state: ${pkg} is not installed; no binary for this platform\n`);
  process.exit(0);
}
for (const name of ["prose-state", "prose-state-mcp", "prose-state-serve"]) {
  const binary = path.join(dir, "bin", name);
  const launcher = path.join(__dirname, "bin", name);
  const tmp = `${launcher}.link`;
  try {
    fs.chmodSync(binary, 0o755);
    if (name === "prose-state") {
      execFileSync(binary, ["--version"], { stdio: "ignore" });
    }
    fs.rmSync(tmp, { force: true });
    fs.symlinkSync(path.relative(path.dirname(launcher), binary), tmp);
    fs.renameSync(tmp, launcher);
  } catch (err) {
    fs.rmSync(tmp, { force: true });
    process.stderr.write(`prose-state: ${name} stays a Node launcher: ${err.message}\n`);
  }
}
