package gotest

import (
	"fmt"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/internal/emit/gocode"
)

// externalTest writes the test of a mode=external handler: the scenarios of
// idemtest.ExternalSuite.
func (e emitter) externalTest(f *jen.File) {
	h := e.H
	suite := []jen.Code{
		jen.Id("Migrations"), jen.Qual("os", "DirFS").Call(jen.Lit(e.migrationsDir())),
		jen.Id("Inbox"), jen.Lit(h.Table),
		jen.Id("Lease"), gocode.Duration(h.Lease),
		jen.Id("New"), e.newFunc(),
		jen.Id("Fixture"), e.fixture(),
	}
	if h.Vary != nil {
		suite = append(suite, jen.Id("Variant"), e.variant())
	}
	f.Comment(e.externalDoc())
	f.Func().Id(e.N.Test).Params(jen.Id("t").Op("*").Qual("testing", "T")).Block(
		jen.Qual(gocode.IdemtestPkg, "ExternalSuite").Types(e.recvType(), gocode.Type(h.Msg), e.resultType()).Values(fieldLines(suite)...).Dot("Run").Call(jen.Id("t")),
	)
}

// externalDoc says what the test of a mode=external handler proves.
func (e emitter) externalDoc() string {
	h, n := e.H, e.N
	d := &docText{}
	source := "its receiver and message come from " + h.Fixture + ", called once per scenario with the scenario's idemtest.Provider, which it wires into the receiver"
	if h.Fixture == "" {
		source = "its message is built with random values in its key fields and zero values elsewhere, and its receiver is " + e.zeroReceiverText()
	}
	d.para(fmt.Sprintf(
		"%s proves against a real PostgreSQL that %s, the wrapper of %s (mode=external, lease %s), runs the handler of every %s at most once per key (%s) of the consumer %q "+
			"as far as its provider is concerned, with claims in the table %s. Each scenario is a subtest in a fresh schema with the goose migrations of %s applied, "+
			"and a lease shortened for the test where it waits for one to expire; %s:",
		n.Test, n.Wrapper, gocode.HandlerName(h), gocode.DurationText(h.Lease), gocode.MessageName(h, e.Pkg.Path), gocode.KeyPaths(h), h.Consumer, h.Table,
		e.migrationsDir()+"/", source))
	d.item(fmt.Sprintf("concurrent_deliveries: %d deliveries of one message while the first holds a live claim give one handler call and %d idem.ErrInProgress at once, without waiting;",
		Deliveries, Deliveries-1))
	d.item("duplicate_after_done: once the key is done, every redelivery is idem.Duplicate with the stored result and does not run the handler;")
	d.item("lease_takeover: a worker that stops heartbeating loses its claim when the lease expires; exactly one redelivery takes it over, with the same idempotency key (idem.KeyFrom), and the row ends done with attempts = 2;")
	d.item("claim_lost: the worker whose claim was taken over while its handler ran cannot record the key done: its result is discarded and it gets idem.ErrClaimLost;")
	reused := "key_reused: a message with the same key and another payload gets idem.ErrKeyReused and changes nothing"
	switch {
	case h.Vary != nil && h.Fixture != "":
		d.item(reused + fmt.Sprintf("; that message is the fixture's Variant or, without one, the message with %s changed;", h.Vary.Field))
	case h.Vary != nil:
		d.item(reused + fmt.Sprintf("; that message has %s changed;", h.Vary.Field))
	case h.Fixture != "":
		d.item(fmt.Sprintf("key_reused, when %s supplies a Variant (%s): a message with the same key and another payload gets idem.ErrKeyReused and changes nothing;", h.Fixture, h.NoVary))
	}
	d.item("handler_error: a handler error releases the claim, and the retry is processed.")
	if h.Fixture != "" {
		d.para(fmt.Sprintf("%s's idemtest.Provider deduplicates by idempotency key, as payment providers do: after each scenario it must have received "+
			"only the key idem.ExternalKey(%q, key) and made its effect exactly once.", h.Fixture, h.Consumer))
	} else {
		if h.Vary == nil {
			d.para("key_reused is not run: " + h.NoVary + ".")
		}
		d.para(fmt.Sprintf("The provider's effect is not counted: the handler is called with its zero receiver. A fixture wires the scenario's idemtest.Provider, "+
			"a double that deduplicates by idempotency key, into the receiver and chooses the message (see idemtest.ExternalFixture): "+
			"declare it in a _test.go file of package %s,", e.Pkg.Name))
		d.code(fmt.Sprintf("func %s(t testing.TB, p *idemtest.Provider) idemtest.ExternalFixture[%s, %s]", fixtureName(h.Func), e.recvText(), gocode.TypeText(h.Msg, e.Pkg.Path)))
		d.para(fmt.Sprintf("and add fixture=%s to the //idem:handler directive of %s.", fixtureName(h.Func), h.Func))
	}
	d.para("Without IDEMGEN_TEST_DATABASE_URL (DATABASE_URL is never used) the test is skipped, and with IDEMGEN_REQUIRE_DB set it fails instead; " +
		fmt.Sprintf("IDEMGEN_TEST_DELIVERIES sets another number of concurrent deliveries than %d.", Deliveries))
	return d.String()
}
