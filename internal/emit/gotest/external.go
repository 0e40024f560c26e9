package gotest

import (
	"fmt"
	"time"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/internal/emit/gocode"
)

// ExternalLease is idemtest.ExternalLease, the lease of the external
// scenarios, for the generated documentation.
const ExternalLease = 2 * time.Second

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
			"and the lease shortened to %s (idemtest.ExternalLease); %s:",
		n.Test, n.Wrapper, gocode.HandlerName(h), gocode.DurationText(h.Lease), gocode.MessageName(h, e.Pkg.Path), gocode.KeyPaths(h), h.Consumer, h.Table,
		e.migrationsDir()+"/", gocode.DurationText(ExternalLease), source))
	d.item(fmt.Sprintf("concurrent_during_run: %d deliveries of one message at once while the first run is held between its handler and its done give one run "+
		"and %d idem.ErrInProgress at once; after done, %d redeliveries are idem.Duplicate with the stored result and run nothing;",
		Deliveries, Deliveries-1, Deliveries))
	d.item(fmt.Sprintf("lease_takeover: a worker that dies after its handler and before its done leaves its claim running; once its lease (%s in the test) has run out, "+
		"the redelivery takes the key over once: a second run with the same idempotency key, done with attempts = 2;", gocode.DurationText(ExternalLease)))
	d.item("heartbeat_keeps_claim: a run held for three leases keeps its claim through heartbeats: every duplicate meanwhile is idem.ErrInProgress, and the run ends processed with attempts = 1;")
	d.item("claim_lost: a claim whose fence is bumped while its run is held (as a takeover does) cancels the run's context with cause idem.ErrClaimLost, " +
		"and the worker cannot record the key done: idem.ErrClaimLost, its result discarded;")
	reused := "key_reused: a message with the key of a processed one and another payload gets idem.ErrKeyReused and runs nothing"
	switch {
	case h.Vary != nil && h.Fixture != "":
		d.item(reused + fmt.Sprintf("; that message is the fixture's Variant or, without one, the message with %s changed;", h.Vary.Field))
	case h.Vary != nil:
		d.item(reused + fmt.Sprintf("; that message has %s changed;", h.Vary.Field))
	case h.Fixture != "":
		d.item(fmt.Sprintf("key_reused, when %s supplies a Variant (%s): a message with the key of a processed one and another payload gets idem.ErrKeyReused and runs nothing;", h.Fixture, h.NoVary))
	}
	d.item("handler_error_retry: a run that fails releases the claim (attempts = 2) and returns its error; the retry is processed.")
	if h.Fixture != "" {
		d.para(fmt.Sprintf("%s wires each scenario's idemtest.Provider, which deduplicates by idempotency key as payment providers do, into the receiver: "+
			"where a run repeats, the scenarios check that the provider got the same key (idem.ExternalKey(%q, key)) and made its effect once.", h.Fixture, h.Consumer))
	} else {
		if h.Vary == nil {
			d.para("key_reused is not run: " + h.NoVary + ".")
		}
		d.para(fmt.Sprintf("The provider's keys and effects are not checked: the handler runs with its zero receiver. A fixture wires the scenario's idemtest.Provider, "+
			"a double that deduplicates by idempotency key, into the receiver and chooses the message (see idemtest.ExternalFixture): "+
			"declare it in a _test.go file of package %s,", e.Pkg.Name))
		d.code(signature(fixtureName(h.Func), []string{"t testing.TB", "p *idemtest.Provider"},
			fmt.Sprintf("idemtest.ExternalFixture[%s, %s]", e.recvText(), gocode.TypeText(h.Msg, e.Pkg.Path))))
		d.para(fmt.Sprintf("and add fixture=%s to the //idem:handler directive of %s.", fixtureName(h.Func), h.Func))
	}
	d.para("Without IDEMGEN_TEST_DATABASE_URL (DATABASE_URL is never used) the test is skipped, and with IDEMGEN_REQUIRE_DB set it fails instead; " +
		fmt.Sprintf("IDEMGEN_TEST_DELIVERIES sets another number of concurrent deliveries than %d.", Deliveries))
	return d.String()
}
