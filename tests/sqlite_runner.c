/*
 * sqlite_runner.c
 *
 * The SQLite half of the regression suite, in the manner of pg_regress: it
 * reads an SQL script on stdin, runs each statement with the fence extension
 * loaded, and prints the statement, its rows and its errors (message and the
 * extended result code's name) to stdout, for tests/run_sqlite_regress.sh to
 * diff against tests/sqlite/expected/. Written in C rather than Python so
 * that the same program runs under AddressSanitizer and UBSan with leak
 * checking, and so that connections are closed with sqlite3_close(), which
 * fails if the extension leaves a statement unfinalized.
 *
 *   fence_sqlite_runner EXTENSION DBFILE < script.sql
 *
 * Lines of the script that begin with a backslash are runner commands:
 *   \connect NAME           switch to connection NAME (opened on DBFILE
 *                           with the extension loaded on first use)
 *   \connect NAME noload    the same, without loading the extension
 *   \close NAME             close connection NAME
 *   \hooks                  install counting commit and rollback hooks, as an
 *                           application would, on the current connection
 *   \hookcount              print how often they fired
 *   \triggers on|off        sqlite3_db_config(SQLITE_DBCONFIG_ENABLE_TRIGGER)
 *                           on the current connection, as an application may
 * Comment lines ("--") are echoed; everything else is SQL.
 */
#include <sqlite3.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CONNECTIONS 8

typedef struct Connection
{
	char		name[32];
	sqlite3    *db;
} Connection;

static Connection connections[MAX_CONNECTIONS];
static int	commitCount;
static int	rollbackCount;
static Connection *current;
static const char *extensionPath;
static const char *databasePath;

static const struct
{
	int			code;
	const char *name;
}			codeNames[] =
{
	{SQLITE_ERROR, "SQLITE_ERROR"},
	{SQLITE_BUSY, "SQLITE_BUSY"},
	{SQLITE_BUSY_SNAPSHOT, "SQLITE_BUSY_SNAPSHOT"},
	{SQLITE_LOCKED, "SQLITE_LOCKED"},
	{SQLITE_READONLY, "SQLITE_READONLY"},
	{SQLITE_MISMATCH, "SQLITE_MISMATCH"},
	{SQLITE_MISUSE, "SQLITE_MISUSE"},
	{SQLITE_CONSTRAINT, "SQLITE_CONSTRAINT"},
	{SQLITE_CONSTRAINT_FUNCTION, "SQLITE_CONSTRAINT_FUNCTION"},
	{SQLITE_CONSTRAINT_TRIGGER, "SQLITE_CONSTRAINT_TRIGGER"},
	{SQLITE_CONSTRAINT_CHECK, "SQLITE_CONSTRAINT_CHECK"},
	{SQLITE_CONSTRAINT_NOTNULL, "SQLITE_CONSTRAINT_NOTNULL"},
	{SQLITE_CONSTRAINT_PRIMARYKEY, "SQLITE_CONSTRAINT_PRIMARYKEY"},
	{SQLITE_CONSTRAINT_UNIQUE, "SQLITE_CONSTRAINT_UNIQUE"},
	{SQLITE_NOMEM, "SQLITE_NOMEM"},
};

static const char *
codeName(int code)
{
	static char buf[32];
	size_t		i;

	for (i = 0; i < sizeof(codeNames) / sizeof(codeNames[0]); i++)
		if (codeNames[i].code == code)
			return codeNames[i].name;
	snprintf(buf, sizeof(buf), "code %d", code);
	return buf;
}

static Connection *
openConnection(const char *name, int load)
{
	Connection *c = NULL;
	char	   *err = NULL;
	int			i;

	for (i = 0; i < MAX_CONNECTIONS; i++)
		if (connections[i].db && strcmp(connections[i].name, name) == 0)
			return &connections[i];
	for (i = 0; i < MAX_CONNECTIONS && c == NULL; i++)
		if (connections[i].db == NULL)
			c = &connections[i];
	if (c == NULL)
	{
		fprintf(stderr, "too many connections\n");
		exit(2);
	}
	if (sqlite3_open(databasePath, &c->db) != SQLITE_OK)
	{
		fprintf(stderr, "cannot open %s: %s\n", databasePath, sqlite3_errmsg(c->db));
		exit(2);
	}
	snprintf(c->name, sizeof(c->name), "%s", name);
	sqlite3_busy_timeout(c->db, 0);
	if (load)
	{
		sqlite3_enable_load_extension(c->db, 1);
		if (sqlite3_load_extension(c->db, extensionPath, NULL, &err) != SQLITE_OK)
		{
			fprintf(stderr, "cannot load %s: %s\n", extensionPath, err ? err : "?");
			exit(2);
		}
		sqlite3_enable_load_extension(c->db, 0);
	}
	return c;
}

static void
closeConnection(Connection *c)
{
	int			rc = sqlite3_close(c->db);

	if (rc != SQLITE_OK)
		printf("ERROR (%s):  sqlite3_close: %s\n", codeName(rc), sqlite3_errmsg(c->db));
	c->db = NULL;
	if (current == c)
		current = NULL;
}

static void
printValue(sqlite3_stmt *stmt, int i)
{
	switch (sqlite3_column_type(stmt, i))
	{
		case SQLITE_NULL:
			break;
		case SQLITE_BLOB:
			{
				const unsigned char *p = sqlite3_column_blob(stmt, i);
				int			n = sqlite3_column_bytes(stmt, i);
				int			k;

				printf("x'");
				for (k = 0; k < n; k++)
					printf("%02x", p[k]);
				printf("'");
				break;
			}
		default:
			fputs((const char *) sqlite3_column_text(stmt, i), stdout);
	}
}

/* Run every statement of sql on the current connection, printing results. */
static void
runSql(const char *sql)
{
	const char *tail = sql;

	while (tail && *tail)
	{
		sqlite3_stmt *stmt = NULL;
		int			rc = sqlite3_prepare_v2(current->db, tail, -1, &stmt, &tail);

		if (rc != SQLITE_OK)
		{
			printf("ERROR (%s):  %s\n", codeName(sqlite3_extended_errcode(current->db)),
				   sqlite3_errmsg(current->db));
			return;
		}
		if (stmt == NULL)
			continue;
		while ((rc = sqlite3_step(stmt)) == SQLITE_ROW)
		{
			int			i;

			for (i = 0; i < sqlite3_column_count(stmt); i++)
			{
				if (i)
					putchar('|');
				printValue(stmt, i);
			}
			putchar('\n');
		}
		if (rc != SQLITE_DONE)
			printf("ERROR (%s):  %s\n", codeName(sqlite3_extended_errcode(current->db)),
				   sqlite3_errmsg(current->db));
		sqlite3_finalize(stmt);
		if (rc != SQLITE_DONE)
			return;
	}
}

static int
countCommit(void *arg)
{
	(void) arg;
	commitCount++;
	return 0;
}

static void
countRollback(void *arg)
{
	(void) arg;
	rollbackCount++;
}

static void
runCommand(char *line)
{
	char		cmd[32] = "", name[32] = "", opt[32] = "";

	sscanf(line, "\\%31s %31s %31s", cmd, name, opt);
	if (strcmp(cmd, "connect") == 0 && name[0])
		current = openConnection(name, strcmp(opt, "noload") != 0);
	else if (strcmp(cmd, "close") == 0 && name[0])
	{
		int			i;

		for (i = 0; i < MAX_CONNECTIONS; i++)
			if (connections[i].db && strcmp(connections[i].name, name) == 0)
				closeConnection(&connections[i]);
	}
	else if (strcmp(cmd, "hooks") == 0 && current)
	{
		sqlite3_commit_hook(current->db, countCommit, NULL);
		sqlite3_rollback_hook(current->db, countRollback, NULL);
	}
	else if (strcmp(cmd, "triggers") == 0 && current &&
			 (strcmp(name, "on") == 0 || strcmp(name, "off") == 0))
	{
		int			bOn = -1;

		sqlite3_db_config(current->db, SQLITE_DBCONFIG_ENABLE_TRIGGER, strcmp(name, "on") == 0,
						  &bOn);
		printf("triggers %s\n", bOn ? "on" : "off");
	}
	else if (strcmp(cmd, "hookcount") == 0)
		printf("commit hook: %d, rollback hook: %d\n", commitCount, rollbackCount);
	else
	{
		fprintf(stderr, "unknown runner command: %s", line);
		exit(2);
	}
}

int
main(int argc, char **argv)
{
	char		line[65536];
	char	   *sql = NULL;
	size_t		len = 0;
	int			i;

	if (argc != 3)
	{
		fprintf(stderr, "usage: %s EXTENSION DBFILE < script.sql\n", argv[0]);
		return 2;
	}
	extensionPath = argv[1];
	databasePath = argv[2];
	current = openConnection("main", 1);

	while (fgets(line, sizeof(line), stdin))
	{
		size_t		n = strlen(line);

		if (len == 0 && (line[0] == '\\' || strncmp(line, "--", 2) == 0 ||
						 strspn(line, " \t\r\n") == n))
		{
			fputs(line, stdout);
			if (line[0] == '\\')
				runCommand(line);
			continue;
		}
		sql = realloc(sql, len + n + 1);
		if (sql == NULL)
			return 2;
		memcpy(sql + len, line, n + 1);
		len += n;
		if (sqlite3_complete(sql))
		{
			fputs(sql, stdout);
			if (current == NULL)
				printf("ERROR:  no current connection\n");
			else
				runSql(sql);
			len = 0;
		}
	}
	if (len)
		printf("ERROR:  incomplete statement at end of script\n");
	free(sql);
	for (i = 0; i < MAX_CONNECTIONS; i++)
		if (connections[i].db)
			closeConnection(&connections[i]);
	return 0;
}
