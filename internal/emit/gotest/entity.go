package gotest

import (
	"fmt"
	"strings"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/internal/emit/gocode"
)

// entityTest writes the test of a mode=entity handler: the scenarios of
// idemtest.EntitySuite.
func (e emitter) entityTest(f *jen.File) {
	h := e.H
	suite := []jen.Code{
		jen.Id("Migrations"), jen.Qual("os", "DirFS").Call(jen.Lit(e.migrationsDir())),
		jen.Id("Table"), jen.Lit(h.Entity.Table),
		jen.Id("New"), e.newFunc(),
		jen.Id("Fixture"), e.fixture(),
	}
	if h.Vary != nil {
		suite = append(suite, jen.Id("Variant"), e.variant())
	}
	f.Comment(e.entityDoc())
	f.Func().Id(e.N.Test).Params(jen.Id("t").Op("*").Qual("testing", "T")).Block(
		jen.Qual(gocode.IdemtestPkg, "EntitySuite").Types(e.recvType(), gocode.Type(h.Msg), e.resultType()).Values(fieldLines(suite)...).Dot("Run").Call(jen.Id("t")),
	)
}

func (e emitter) entityDoc() string {
	h, n, ent := e.H, e.N, e.H.Entity
	d := &docText{}
	source := "its receiver and message come from " + h.Fixture + ", called once per scenario"
	if h.Fixture == "" {
		source = "its message is built with random values in its key fields and zero values elsewhere, and its receiver is " + e.zeroReceiverText()
	}
	d.para(fmt.Sprintf(
		"%s proves against a real PostgreSQL that %s, the wrapper of %s (mode=entity), processes every %s at most once per key (%s) of the consumer %q, "+
			"whose markers are its rows in %s (columns %s) that carry a fingerprint. Each scenario is a subtest in a fresh schema with the goose migrations of %s applied; %s:",
		n.Test, n.Wrapper, gocode.HandlerName(h), gocode.MessageName(h, e.Pkg.Path), gocode.KeyPaths(h), h.Consumer, ent.Table, strings.Join(ent.Columns, ", "),
		e.migrationsDir()+"/", source))
	d.item(fmt.Sprintf("concurrent_deliveries: %d deliveries of one message at once, the first held inside its transaction until the other %d wait on its row in PostgreSQL, "+
		"give one row, exactly one idem.Processed and %d idem.Duplicate with equal results;", Deliveries, Deliveries-1, Deliveries-1))
	d.item("failure_before_commit: a delivery whose connection dies after the handler ran and before the commit leaves no row, and the redelivery is processed once;")
	d.item("crash_after_commit: the redelivery of a committed message to a new worker is idem.Duplicate and does not run the handler;")
	switch {
	case h.Vary != nil:
		d.item(fmt.Sprintf("key_reused: a message with the same key and another payload (the fixture's Variant, or %s changed) gets idem.ErrKeyReused and changes nothing;", h.Vary.Field))
	case h.Fixture != "":
		d.item(fmt.Sprintf("key_reused, when %s supplies a Variant (%s): a message with the same key and another payload gets idem.ErrKeyReused;", h.Fixture, h.NoVary))
	}
	d.item("sequential_duplicate: a second delivery of the message is idem.Duplicate with the first one's result;")
	if h.Fixture != "" {
		d.item(fmt.Sprintf("business_unique_violation, when %s supplies a Conflict: a unique violation of another constraint is the handler's error, never idem.Duplicate, and records nothing;", h.Fixture))
	}
	d.item("killed_mid_transaction: a child process (this test binary) that delivers the message and is killed with SIGKILL after the handler's insert, before the commit, leaves no row; the redelivery is processed once, and the next one is idem.Duplicate.")
	d.para("Without IDEMGEN_TEST_DATABASE_URL (DATABASE_URL is never used) the test is skipped, and with IDEMGEN_REQUIRE_DB set it fails instead; " +
		fmt.Sprintf("IDEMGEN_TEST_DELIVERIES sets another number of concurrent deliveries than %d.", Deliveries))
	return d.String()
}

// naturalTest writes the test of a mode=natural handler: the scenarios of
// idemtest.NaturalSuite, fed by its fixture (required).
func (e emitter) naturalTest(f *jen.File) {
	h := e.H
	suite := []jen.Code{
		jen.Id("Migrations"), jen.Qual("os", "DirFS").Call(jen.Lit(e.migrationsDir())),
		jen.Id("New"), e.newFunc(),
		jen.Id("Fixture"), jen.Id(h.Fixture),
	}
	f.Comment(e.naturalDoc())
	f.Func().Id(e.N.Test).Params(jen.Id("t").Op("*").Qual("testing", "T")).Block(
		jen.Qual(gocode.IdemtestPkg, "NaturalSuite").Types(e.recvType(), gocode.Type(h.Msg), e.resultType()).Values(fieldLines(suite)...).Dot("Run").Call(jen.Id("t")),
	)
}

func (e emitter) naturalDoc() string {
	h, n := e.H, e.N
	d := &docText{}
	d.para(fmt.Sprintf(
		"%s proves against a real PostgreSQL that %s, the handler of the consumer %q (mode=natural, nothing recorded), is idempotent by construction: "+
			"the state it owns, as the Snapshot query of %s returns it, is the same after a redelivery as after one delivery. "+
			"Each scenario is a subtest in a fresh schema with the goose migrations of %s applied:",
		n.Test, gocode.HandlerName(h), h.Consumer, h.Fixture, e.migrationsDir()+"/"))
	d.item("redelivery: the message once, then again: the snapshot after the second delivery equals the one after the first;")
	d.item(fmt.Sprintf("concurrent_redeliveries: the message once, then %d times at once: every delivery succeeds and the snapshot equals the one after the first;", Deliveries))
	d.item(fmt.Sprintf("interleaved, when %s supplies a Second message: the message, the second one, the message again: the snapshot after the redelivery equals the one after the second message.", h.Fixture))
	d.para("A handler that adds to what is there (balance = balance + $1) fails, with the rows and columns that differ. " +
		"Without IDEMGEN_TEST_DATABASE_URL (DATABASE_URL is never used) the test is skipped, and with IDEMGEN_REQUIRE_DB set it fails instead.")
	return d.String()
}
