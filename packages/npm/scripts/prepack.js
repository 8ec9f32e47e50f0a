// scripts/prepack.js: run by `npm pack` and `npm publish` (never by a user's
// `npm install`). Builds the SQLite extension from the repository's own
// sources with its Makefile (sqlite_ext/ and core/, `make sqlite`) and puts
// the result, with the licence, where the package carries it:
// prebuilds/linux-x64/fence.so. A user then needs no C compiler.
"use strict";
const { execFileSync } = require("node:child_process");
const fs = require("node:fs");
const path = require("node:path");

const pkg = path.resolve(__dirname, "..");
const root = path.resolve(pkg, "..", "..");
if (process.platform !== "linux" || process.arch !== "x64") {
  throw new Error(`sqlite-fence is packed on linux-x64 only (this is ${process.platform}-${process.arch})`);
}
const meta = JSON.parse(fs.readFileSync(path.join(root, "META.json"), "utf8"));
const own = JSON.parse(fs.readFileSync(path.join(pkg, "package.json"), "utf8"));
if (own.version !== meta.version) {
  throw new Error(`package.json's version ${own.version} is not META.json's ${meta.version}`);
}
execFileSync("make", ["-s", "-C", root, "sqlite_ext/fence.so"], { stdio: "inherit" });
const dir = path.join(pkg, "prebuilds", "linux-x64");
fs.mkdirSync(dir, { recursive: true });
// stripped of its debug sections: 1/3 of the size, the same code
execFileSync("objcopy", ["--strip-debug", path.join(root, "sqlite_ext", "fence.so"), path.join(dir, "fence.so")]);
fs.copyFileSync(path.join(root, "LICENSE"), path.join(pkg, "LICENSE"));
