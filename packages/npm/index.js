// sqlite-fence: where the fence SQLite extension is, and how to load it into
// a better-sqlite3 or node:sqlite connection.
"use strict";
const fs = require("node:fs");
const path = require("node:path");

const platform = `${process.platform}-${process.arch}`;

function getLoadablePath() {
  const file = path.join(__dirname, "prebuilds", platform, "fence.so");
  if (!fs.existsSync(file)) {
    throw new Error(
      `sqlite-fence carries the extension for linux-x64 only, not ${platform}: ` +
        "build it from source (`make` in the fence repository gives sqlite_ext/fence.so) " +
        "and pass that path to db.loadExtension()"
    );
  }
  return file;
}

// better-sqlite3: db.loadExtension(path). node:sqlite (Node 22.5 and later):
// the DatabaseSync must be opened with { allowExtension: true }; loading is
// switched on for the call and off again.
function load(db) {
  if (!db || typeof db.loadExtension !== "function") {
    throw new TypeError("sqlite-fence: load(db) takes a better-sqlite3 Database or a node:sqlite DatabaseSync");
  }
  const file = getLoadablePath();
  if (typeof db.enableLoadExtension === "function") {
    db.enableLoadExtension(true);
    try {
      db.loadExtension(file);
    } finally {
      db.enableLoadExtension(false);
    }
  } else {
    db.loadExtension(file);
  }
}

module.exports = { getLoadablePath, load };
