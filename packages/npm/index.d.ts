/** The absolute path of the fence SQLite extension this package carries (linux-x64). */
export declare function getLoadablePath(): string;

/** What load() needs of a connection: better-sqlite3's Database, or node:sqlite's DatabaseSync. */
export interface LoadableDatabase {
  loadExtension(file: string, entryPoint?: string): unknown;
  enableLoadExtension?(allow: boolean): unknown;
}

/**
 * Load fence into the connection. Every connection that writes a protected
 * table must load it. node:sqlite: open with `{ allowExtension: true }`.
 */
export declare function load(db: LoadableDatabase): void;
