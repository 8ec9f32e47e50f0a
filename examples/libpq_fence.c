/*
 * examples/libpq_fence.c: fence from libpq.
 *
 * Two lock holders write one account, each with its own connection. Holder
 * A was granted token 7 and read the balance; the lock then passed to
 * holder B with token 8 (A paused, its lease ran out). Each writes the way
 * an application should: BEGIN, SELECT fence_check(resource, token), the
 * UPDATE, COMMIT. B's transaction commits; A's fence_check fails with
 * SQLSTATE 23T01 and A rolls back. The program shows how a C caller reads
 * the SQLSTATE, the highest token (DETAIL) and the advice (HINT) from a
 * failed PGresult.
 *
 * Build and run (examples/run.py does both, against a throwaway server):
 *
 *     cc -o libpq_fence examples/libpq_fence.c -I$(pg_config --includedir) -lpq
 *     FENCE_PG_DSN='dbname=app' ./libpq_fence
 *
 * The database needs CREATE EXTENSION fence. Exit status 0 when A's write
 * was refused and the account holds B's write.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <libpq-fe.h>

static PGconn *
connect_or_die(const char *conninfo)
{
	PGconn	   *conn = PQconnectdb(conninfo);

	if (PQstatus(conn) != CONNECTION_OK)
	{
		fprintf(stderr, "cannot connect to \"%s\": %s", conninfo, PQerrorMessage(conn));
		exit(2);
	}
	return conn;
}

static void
exec_or_die(PGconn *conn, const char *sql)
{
	PGresult   *res = PQexec(conn, sql);

	if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		fprintf(stderr, "setup statement failed: %s  %s\n", PQerrorMessage(conn), sql);
		exit(2);
	}
	PQclear(res);
}

/*
 * One fenced write: BEGIN; fence_check; UPDATE; COMMIT. On failure, roll
 * back and copy the SQLSTATE and message into sqlstate/msg; return 0.
 */
static int
write_balance(PGconn *conn, const char *token, const char *balance, char *sqlstate, char *msg,
			  size_t msglen)
{
	const char *check_args[2] = {"account-1", token};
	const char *update_args[1] = {balance};
	PGresult   *res;

	exec_or_die(conn, "BEGIN");
	res = PQexecParams(conn, "SELECT fence_check($1, $2::bigint)", 2, NULL, check_args, NULL, NULL, 0);
	if (PQresultStatus(res) == PGRES_TUPLES_OK)
	{
		PQclear(res);
		res = PQexecParams(conn, "UPDATE account SET balance = $1::int WHERE id = 1", 1, NULL,
						   update_args, NULL, NULL, 0);
	}
	if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
		const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
		const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);
		const char *hint = PQresultErrorField(res, PG_DIAG_MESSAGE_HINT);

		snprintf(sqlstate, 6, "%s", state ? state : "?????");
		snprintf(msg, msglen, "%s\n  DETAIL: %s\n  HINT: %s", primary ? primary : "",
				 detail ? detail : "", hint ? hint : "");
		PQclear(res);
		exec_or_die(conn, "ROLLBACK");
		return 0;
	}
	PQclear(res);
	exec_or_die(conn, "COMMIT");
	return 1;
}

int
main(int argc, char **argv)
{
	const char *conninfo = argc > 1 ? argv[1] : (getenv("FENCE_PG_DSN") ? getenv("FENCE_PG_DSN") : "");
	PGconn	   *a, *b;
	PGresult   *res;
	char		sqlstate[6] = "", msg[2048] = "";
	int			refused = 0, ok;

	b = connect_or_die(conninfo);
	exec_or_die(b, "SET client_min_messages = warning");
	exec_or_die(b, "DROP TABLE IF EXISTS account");
	exec_or_die(b, "CREATE TABLE account (id int PRIMARY KEY, balance int)");
	exec_or_die(b, "INSERT INTO account VALUES (1, 100)");
	/* only so that the example can run again; an application never does this */
	exec_or_die(b, "SELECT fence_reset('account-1')");
	printf("account 1 holds 100; writes to it are fenced on \"account-1\" with fence_check\n");

	a = connect_or_die(conninfo);
	printf("holder A was granted token 7 and read 100; then it paused, and the lock passed to B with token 8\n");

	ok = write_balance(b, "8", "70", sqlstate, msg, sizeof(msg));
	printf("B: BEGIN; fence_check('account-1', 8); UPDATE balance = 70; COMMIT: %s\n",
		   ok ? "committed" : msg);

	ok = write_balance(a, "7", "130", sqlstate, msg, sizeof(msg));
	if (!ok && strcmp(sqlstate, "23T01") == 0)
	{
		refused = 1;
		printf("A: BEGIN; fence_check('account-1', 7): refused with SQLSTATE %s, rolled back:\n  %s\n",
			   sqlstate, msg);
	}
	else
		printf("A: BEGIN; fence_check('account-1', 7); UPDATE balance = 130; COMMIT: %s\n",
			   ok ? "COMMITTED" : msg);

	res = PQexec(b, "SELECT balance, fence_current('account-1') FROM account WHERE id = 1");
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
	{
		fprintf(stderr, "cannot read the account back: %s", PQerrorMessage(b));
		return 2;
	}
	printf("committed: account 1 holds %s; the highest token accepted for \"account-1\" is %s\n",
		   PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1));
	ok = refused && strcmp(PQgetvalue(res, 0, 0), "70") == 0 && strcmp(PQgetvalue(res, 0, 1), "8") == 0;
	PQclear(res);
	PQfinish(a);
	PQfinish(b);
	printf(ok ? "as expected: the stale write was refused and B's write stands\n" : "NOT AS EXPECTED\n");
	return ok ? 0 : 1;
}
