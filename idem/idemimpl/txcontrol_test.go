package idemimpl

import "testing"

func TestTransactionControl(t *testing.T) {
	for _, c := range []struct {
		sql, words string
	}{
		{"COMMIT", "COMMIT"},
		{"  commit;", "COMMIT"},
		{"Commit Work", "COMMIT"},
		{"COMMIT AND CHAIN", "COMMIT"},
		{"END", "END"},
		{"end transaction", "END"},
		{"ABORT", "ABORT"},
		{"ROLLBACK", "ROLLBACK"},
		{"rollback and chain", "ROLLBACK"},
		{"BEGIN", "BEGIN"},
		{"begin isolation level serializable", "BEGIN"},
		{"START TRANSACTION", "START TRANSACTION"},
		{"PREPARE TRANSACTION 'x'", "PREPARE TRANSACTION"},
		{"-- a comment\nCOMMIT", "COMMIT"},
		{"/* a /* nested */ comment */ COMMIT", "COMMIT"},
		{"UPDATE t SET a = 1; COMMIT", "COMMIT"},
		{"UPDATE t SET a = 1;COMMIT;UPDATE t SET a = 2", "COMMIT"},
		{"SELECT 1; ROLLBACK; BEGIN", "ROLLBACK"},
		{"SELECT 'x'';'; COMMIT", "COMMIT"},
		{`SELECT E'\';'; END`, "END"},
		{`SELECT "a;b" FROM t; commit`, "COMMIT"},

		// Inside the inbox's transaction, or no transaction control.
		{"ROLLBACK TO SAVEPOINT sp", ""},
		{"rollback to sp", ""},
		{"ROLLBACK WORK TO SAVEPOINT sp", ""},
		{"ROLLBACK TRANSACTION TO sp", ""},
		{"SAVEPOINT sp", ""},
		{"RELEASE SAVEPOINT sp", ""},
		{"PREPARE q AS SELECT 1", ""},
		{"START", ""},
		{"UPDATE t SET status = 'COMMIT'", ""},
		{"SELECT 'a; COMMIT'", ""},
		{`SELECT E'\'; COMMIT'`, ""},
		{`SELECT "x; COMMIT"`, ""},
		{"SELECT 1 -- ; COMMIT", ""},
		{"SELECT 1 /* ; COMMIT */", ""},
		{"DO $$ BEGIN PERFORM 1; END $$", ""},
		{"DO $body$ BEGIN COMMIT; END $body$", ""},
		{"SELECT $1::text; SELECT $2", ""},
		{"SELECT a$b FROM t; SELECT 1", ""},
		{"SELECT CASE WHEN true THEN 1 END", ""},
		{"COMMITTED", ""},
		{"committee_members", ""},
		{"END_DATE", ""},
		{"", ""},
		{";;", ""},
	} {
		if got, _ := transactionControl(c.sql); got != c.words {
			t.Errorf("transactionControl(%q) = %q; want %q", c.sql, got, c.words)
		}
	}
}
