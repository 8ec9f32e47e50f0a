// tests/npm_typecheck.ts: the package's types, as a TypeScript user meets
// them (tests/npm_package.sh compiles this with tsc --noEmit --strict).
import Database from "better-sqlite3";
import { getLoadablePath, load } from "sqlite-fence";

const db = new Database(":memory:");
load(db);
const file: string = getLoadablePath();
db.loadExtension(file);
// @ts-expect-error: load() takes a connection
load("app.db");
