/* pg_ext/fence--1.3--1.4.sql: fence 1.3 to 1.4 */

\echo Use "ALTER EXTENSION fence UPDATE TO '1.4'" to load this file. \quit
