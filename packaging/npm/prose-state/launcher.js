// The command as npm first links it: a Node process that starts this platform's binary (from
// the package prose-state-<platform>-<arch>) with the same arguments and stdio, and exits as it
// did. install.js replaces each bin/ file with a link to the binary itself after installing, so
// this runs only where install scripts did not (npm --ignore-scripts).
"use strict";
const { spawnSync } = require("child_process");
const path = require("path");

module.exports = function launch(name) {
  const pkg = `prose-state-${process.platform}-${process.arch}`;
  let dir;
  try {
    dir = path.dirname(require.resolve(`${pkg}/package.json`));
  } catch {
    process.stderr.write(
      `${name}: no binary for ${process.platform}-${process.arch}: the package ${pkg} is not installed\n`
    );
    process.exit(1);
  }
  const result = spawnSync(path.join(dir, "bin", name), process.argv.slice(2), {
    stdio: "inherit",
  });
  if (result.error) {
    process.stderr.write(`${name}: ${result.error.message}\n`);
    process.exit(1);
  }
  if (result.signal) {
    process.kill(process.pid, result.signal);
  }
  process.exit(result.status);
};
