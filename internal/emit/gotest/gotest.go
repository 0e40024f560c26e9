// Package gotest emits idem_gen_test.go: for each handler of a package, a test
// Test<Func>Idem that runs the scenarios of idemtest.Suite against the
// handler's generated wrapper on a real PostgreSQL. The scenarios themselves
// live once in idemtest; what is emitted is what is specific to one handler:
// its types, its inbox table and migrations, how to build the wrapper, and
// its fixture or a message built from its key.
package gotest

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/internal/emit/gocode"
	"github.com/idemgen/idemgen/internal/model"
)

// Deliveries is idemtest.DefaultDeliveries, for the generated documentation.
const Deliveries = 16

// File renders idem_gen_test.go for pkg, which has at least one handler.
func File(pkg model.Package) ([]byte, error) {
	return gocode.File(pkg, model.TestFile, nil, func(f *jen.File, e gocode.Emitter) {
		emitter{e}.test(f)
	})
}

// emitter writes the test of one handler.
type emitter struct{ gocode.Emitter }

func (e emitter) test(f *jen.File) {
	switch {
	case e.H.External():
		e.externalTest(f)
		return
	case e.H.EntityMode():
		e.entityTest(f)
		return
	case e.H.Natural():
		e.naturalTest(f)
		return
	}
	h := e.H
	recv, msg, result := e.recvType(), gocode.Type(h.Msg), e.resultType()

	suite := []jen.Code{
		jen.Id("Migrations"), jen.Qual("os", "DirFS").Call(jen.Lit(e.migrationsDir())),
		jen.Id("Inbox"), jen.Lit(h.Table),
		jen.Id("New"), e.newFunc(),
		jen.Id("Fixture"), e.fixture(),
		jen.Id("Batch"), e.batchFunc(),
	}
	if h.Vary != nil {
		suite = append(suite, jen.Id("Variant"), e.variant())
	}
	if h.Set {
		if rekey := e.rekey(); rekey != nil {
			suite = append(suite, jen.Id("Rekey"), rekey)
		}
		suite = append(suite, jen.Id("SetWith"), e.setWith(), jen.Id("Handler"), jen.Lit(gocode.HandlerName(h)))
	}
	if h.Outbox {
		suite = append(suite, jen.Id("Outbox"), jen.Op("&").Qual(gocode.IdemtestPkg, "Outbox").Types(msg).Values(
			jen.Line().Id("Consumer").Op(":").Lit(h.Consumer),
			jen.Line().Id("Key").Op(":").Id(e.N.KeyFunc),
			jen.Line(),
		))
	}
	if h.Partition != nil {
		suite = append(suite, jen.Id("Partition"), e.partition())
	}
	f.Comment(e.doc())
	f.Func().Id(e.N.Test).Params(jen.Id("t").Op("*").Qual("testing", "T")).Block(
		jen.Qual(gocode.IdemtestPkg, "Suite").Types(recv, msg, result).Values(fieldLines(suite)...).Dot("Run").Call(jen.Id("t")),
	)
}

// fieldLines lays out name, value pairs of a composite literal one a line.
func fieldLines(pairs []jen.Code) []jen.Code {
	var fields []jen.Code
	for i := 0; i < len(pairs); i += 2 {
		fields = append(fields, jen.Line().Add(pairs[i]).Op(":").Add(pairs[i+1]))
	}
	return append(fields, jen.Line())
}

// newFunc builds the wrapper on the scenario's pool:
//
//	func(s *Service, pool *pgxpool.Pool, opts ...idem.Option) idemtest.HandleFunc[M, R] {
//		return NewChargeIdem(pool, s, opts...).Handle
//	}
func (e emitter) newFunc() jen.Code {
	h := e.H
	args := []jen.Code{jen.Id("pool")}
	var recvParam jen.Code
	if h.Recv != nil {
		name := gocode.ReceiverName(h.Recv.Type)
		recvParam = jen.Id(name).Add(e.recvType())
		args = append(args, jen.Id(name))
	} else {
		recvParam = jen.Id("_").Add(e.recvType())
	}
	args = append(args, jen.Id("opts").Op("..."))
	handle := jen.Id(e.N.Constructor).Call(args...).Dot("Handle")
	if h.Result == nil {
		handle = jen.Qual(gocode.IdemtestPkg, "NoResult").Call(handle)
	}
	return e.funcLit([]jen.Code{
		recvParam,
		jen.Id("pool").Op("*").Qual(gocode.PgxpoolPkg, "Pool"),
		jen.Id("opts").Op("...").Qual(gocode.IdemPkg, "Option"),
	}, jen.Qual(gocode.IdemtestPkg, "HandleFunc").Types(gocode.Type(h.Msg), e.resultType()), jen.Return(handle))
}

// funcLit is a function literal in a field of the suite's literal (two tabs
// in, after a field name of up to 8 bytes): its parameters on the line of
// func when they fit, else one a line.
func (e emitter) funcLit(params []jen.Code, result jen.Code, body ...jen.Code) jen.Code {
	sig := func(multi bool) *jen.Statement {
		return jen.Func().Params(gocode.Items(multi, params...)...).Add(result)
	}
	return sig(e.Long(len("\t\tFixture: {"), sig(false))).Block(body...)
}

// batchFunc builds the wrapper's HandleBatch on the scenario's pool, as
// newFunc builds its Handle.
func (e emitter) batchFunc() jen.Code {
	h := e.H
	args := []jen.Code{jen.Id("pool")}
	var recvParam jen.Code
	if h.Recv != nil {
		name := gocode.ReceiverName(h.Recv.Type)
		recvParam = jen.Id(name).Add(e.recvType())
		args = append(args, jen.Id(name))
	} else {
		recvParam = jen.Id("_").Add(e.recvType())
	}
	args = append(args, jen.Id("opts").Op("..."))
	return e.funcLit([]jen.Code{
		recvParam,
		jen.Id("pool").Op("*").Qual(gocode.PgxpoolPkg, "Pool"),
		jen.Id("opts").Op("...").Qual(gocode.IdemPkg, "Option"),
	}, jen.Qual(gocode.IdemtestPkg, "BatchFunc").Types(gocode.Type(h.Msg), e.resultType()),
		jen.Return(jen.Id(e.N.Constructor).Call(args...).Dot("HandleBatch")))
}

// setWith builds a set-based handler's HandleBatch with the scenario's
// wrap around the handler:
//
//	func(s *Service, pool *pgxpool.Pool, wrap idemtest.SetWrap[M, R], opts ...idem.Option) idemtest.BatchFunc[M, R] {
//		handler := idemtest.Wrapped(wrap, s.PostAll)
//		return idemimpl.NewSetInbox(pool, idemPostAllTable, handler, opts...).HandleBatch
//	}
func (e emitter) setWith() jen.Code {
	h := e.H
	var recvParam jen.Code = jen.Id("_").Add(e.recvType())
	var handler jen.Code = jen.Id(h.Func)
	if h.Recv != nil {
		name := gocode.ReceiverName(h.Recv.Type)
		recvParam = jen.Id(name).Add(e.recvType())
		handler = jen.Id(name).Dot(h.Func)
	}
	newInbox, noResult, wrapped := "NewSetInbox", "NoResultSet", "Wrapped"
	if h.Outbox {
		newInbox, noResult, wrapped = "NewPublishingSetInbox", "NoResultPublishingSet", "WrappedPublishing"
	}
	if h.Result == nil {
		handler = jen.Qual(gocode.ImplPkg, noResult).Call(handler)
	}
	return e.funcLit([]jen.Code{
		recvParam,
		jen.Id("pool").Op("*").Qual(gocode.PgxpoolPkg, "Pool"),
		jen.Id("wrap").Qual(gocode.IdemtestPkg, "SetWrap").Types(gocode.Type(h.Msg), e.resultType()),
		jen.Id("opts").Op("...").Qual(gocode.IdemPkg, "Option"),
	}, jen.Qual(gocode.IdemtestPkg, "BatchFunc").Types(gocode.Type(h.Msg), e.resultType()),
		jen.Id("handler").Op(":=").Qual(gocode.IdemtestPkg, wrapped).Call(jen.Id("wrap"), handler),
		e.Fit(3, func(multi bool) jen.Code {
			return jen.Return(jen.Qual(gocode.ImplPkg, newInbox).Call(gocode.Items(multi,
				jen.Id("pool"), jen.Id(e.N.TableVar), jen.Id("handler"), jen.Id("opts").Op("..."))...).Dot("HandleBatch"))
		}))
}

// rekey returns a copy of the message with fresh unique values in its key
// parts (and the entity of a stale-message guard), for the batch scenarios
// of a set-based handler that need several keys; nil when no key part can
// be changed that way (every part nullable, or reached through a pointer,
// which a copy would share).
func (e emitter) rekey() jen.Code {
	h := e.H
	v, body := e.copyOf()
	parts := append([]model.KeyPart(nil), h.Key...)
	if h.Guard != nil {
		parts = append(parts, h.Guard.Entity)
	}
	changed := map[string]bool{}
	for _, k := range parts {
		if k.Null != nil || changed[k.Path] {
			continue
		}
		through := false
		for _, hop := range k.Hops[:len(k.Hops)-1] {
			through = through || hop.Pointer
		}
		unique, ok := map[model.KeyKind]string{model.KeyString: "UniqueString", model.KeyInt: "UniqueInt", model.KeyUUID: "UniqueUUID"}[k.Kind]
		if through || !ok {
			continue
		}
		changed[k.Path] = true
		field := jen.Id(v)
		for _, hop := range k.Hops {
			field = field.Dot(hop.Field)
		}
		body = append(body, field.Op("=").Qual(gocode.IdemtestPkg, unique).Types(gocode.Type(k.Type)).Call())
	}
	if len(changed) == 0 {
		return nil
	}
	return e.copyFunc(v, body)
}

// fixture is the fixture= function, or else a function that builds a
// message with random values in its key fields and zero values elsewhere.
func (e emitter) fixture() jen.Code {
	h := e.H
	if h.Fixture != "" {
		return jen.Id(h.Fixture)
	}
	fixture, param, paramType := "Fixture", "db", "DB"
	if h.External() {
		fixture, param, paramType = "ExternalFixture", "p", "Provider"
	}
	fixtureType := func() *jen.Statement {
		return jen.Qual(gocode.IdemtestPkg, fixture).Types(e.recvType(), gocode.Type(h.Msg))
	}
	var body []jen.Code
	if h.Msg.Kind == model.Pointer {
		body = append(body, jen.Id("msg").Op(":=").Op("&").Add(gocode.Type(*h.Msg.Elem)).Values())
	} else {
		body = append(body, jen.Id("msg").Op(":=").Add(gocode.Type(h.Msg)).Values())
	}
	allocated, assigned := map[string]bool{}, map[string]bool{}
	if h.Envelope && h.Body().Kind == model.Pointer {
		b := h.Body()
		// The handler gets a body, whatever its key.
		allocated["msg.Body"] = true
		body = append(body, jen.Id("msg.Body").Op("=").Op("&").Add(gocode.Type(*b.Elem)).Values())
	}
	set := func(k model.KeyPart) {
		expr := "msg"
		for i, hop := range k.Hops {
			expr += "." + hop.Field
			if i < len(k.Hops)-1 && hop.Elem != nil && !allocated[expr] {
				allocated[expr] = true
				body = append(body, jen.Id(expr).Op("=").Op("&").Add(gocode.Type(*hop.Elem)).Values())
			}
		}
		switch {
		case assigned[expr]:
		case k.Null != nil:
			// Its zero value is NULL: the tests prove the key with a NULL
			// part, the case a plain unique index gets wrong.
			text := k.Path + " stays NULL: the scenarios prove the key with a NULL part."
			if len("\t\t\t// "+text) <= gocode.Width {
				body = append(body, jen.Comment(text))
			} else {
				body = append(body, jen.Comment(k.Path+" stays NULL: the scenarios prove the key"), jen.Comment("with a NULL part."))
			}
		default:
			unique := map[model.KeyKind]string{model.KeyString: "UniqueString", model.KeyInt: "UniqueInt", model.KeyUUID: "UniqueUUID"}[k.Kind]
			body = append(body, jen.Id(expr).Op("=").Qual(gocode.IdemtestPkg, unique).Types(gocode.Type(k.Type)).Call())
		}
		assigned[expr] = true
	}
	for _, k := range h.Key {
		set(k)
	}
	if h.Guard != nil {
		// The stale-message guard needs an entity; version 0 is as good as
		// any for a first message.
		set(h.Guard.Entity)
	}
	if h.Envelope {
		// Every delivery of a broker has a message id, and the body
		// something to fingerprint. A Request's key parts are its own.
		if !h.Request && !assigned["msg.ID"] {
			body = append(body, jen.Id("msg.ID").Op("=").Qual(gocode.IdemtestPkg, "UniqueString").Types(jen.String()).Call())
		}
		if v := h.Vary; v != nil && v.Kind != model.VaryBool && !assigned["msg."+v.Field] {
			unique := map[model.VaryKind]string{model.VaryString: "UniqueString", model.VaryInt: "UniqueInt"}[v.Kind]
			body = append(body, jen.Id("msg."+v.Field).Op("=").Qual(gocode.IdemtestPkg, unique).Types(gocode.Type(v.Type)).Call())
		}
	}
	var values []jen.Code
	if r := e.zeroReceiver(); r != nil {
		values = append(values, jen.Line().Id("Receiver").Op(":").Add(r))
	}
	values = append(values, jen.Line().Id("Message").Op(":").Id("msg"), jen.Line())
	body = append(body, jen.Return(fixtureType().Values(values...)))
	return e.funcLit([]jen.Code{
		jen.Id("t").Qual("testing", "TB"),
		jen.Id(param).Op("*").Qual(gocode.IdemtestPkg, paramType),
	}, fixtureType(), body...)
}

// zeroReceiver spells the zero value of the receiver type: &Service{} for a
// pointer receiver; nil when the Fixture's zero value is it already.
func (e emitter) zeroReceiver() jen.Code {
	r := e.H.Recv
	switch {
	case r == nil:
		return nil
	case r.Pointer && r.Struct:
		return jen.Op("&").Id(r.Type).Values()
	case r.Pointer:
		return jen.New(jen.Id(r.Type))
	case r.Struct:
		return jen.Id(r.Type).Values()
	}
	return nil
}

// partition is the Suite's Partition of a partitioned inbox: the bucket, the
// message's time field read and set on a copy, and the wrapper for the
// janitor.
func (e emitter) partition() jen.Code {
	h := e.H
	msg, field := gocode.Type(h.Msg), h.Partition.Time.Path
	at := jen.Qual("time", "Time")
	set := []jen.Code{jen.Id("msg").Dot(field).Op("=").Id("at"), jen.Return(jen.Id("msg"))}
	if h.Msg.Kind == model.Pointer {
		set = []jen.Code{
			jen.Id("v").Op(":=").Op("*").Id("msg"),
			jen.Id("v").Dot(field).Op("=").Id("at"),
			jen.Return(jen.Op("&").Id("v")),
		}
	}
	args := []jen.Code{jen.Id("pool")}
	recvParam := jen.Id("_").Add(e.recvType())
	if h.Recv != nil {
		name := gocode.ReceiverName(h.Recv.Type)
		recvParam = jen.Id(name).Add(e.recvType())
		args = append(args, jen.Id(name))
	}
	args = append(args, jen.Id("opts").Op("..."))
	maintained := jen.Func().Params(gocode.Items(true,
		recvParam,
		jen.Id("pool").Op("*").Qual(gocode.PgxpoolPkg, "Pool"),
		jen.Id("opts").Op("...").Qual(gocode.IdemPkg, "Option"),
	)...).Qual(gocode.IdemPkg, "Maintained").Block(jen.Return(jen.Id(e.N.Constructor).Call(args...)))
	return jen.Op("&").Qual(gocode.IdemtestPkg, "Partition").Types(e.recvType(), msg).Values(
		jen.Line().Id("Bucket").Op(":").Add(gocode.Bucket(h.Partition.Bucket)),
		jen.Line().Id("Time").Op(":").Func().Params(jen.Id("msg").Add(msg)).Add(at).Block(jen.Return(jen.Id("msg").Dot(field))),
		jen.Line().Id("SetTime").Op(":").Func().Params(jen.Id("msg").Add(msg), jen.Id("at").Add(at)).Add(msg).Block(set...),
		jen.Line().Id("Maintained").Op(":").Add(maintained),
		jen.Line(),
	)
}

// variant changes the Vary field of a copy of the message.
func (e emitter) variant() jen.Code {
	h := e.H
	v, body := e.copyOf()
	if h.Envelope && h.Body().Kind == model.Pointer {
		// A copy of the envelope shares its body: change a copy of that.
		if v == "msg" {
			v = "v"
			body = append(body, jen.Id("v").Op(":=").Id("msg"))
		}
		body = append(body, jen.Id("b").Op(":=").Op("*").Id(v).Dot("Body"), jen.Id(v).Dot("Body").Op("=").Op("&").Id("b"))
	}
	field := jen.Id(v).Dot(h.Vary.Field)
	switch h.Vary.Kind {
	case model.VaryString:
		body = append(body, field.Op("+=").Lit("-variant"))
	case model.VaryInt:
		body = append(body, field.Op("++"))
	case model.VaryBool:
		body = append(body, field.Op("=").Op("!").Id(v).Dot(h.Vary.Field))
	}
	return e.copyFunc(v, body)
}

// copyOf begins a function of msg that changes a copy of it: the name of
// the copy, and the statement that makes it when msg is a pointer.
func (e emitter) copyOf() (string, []jen.Code) {
	if e.H.Msg.Kind == model.Pointer {
		return "v", []jen.Code{jen.Id("v").Op(":=").Op("*").Id("msg")}
	}
	return "msg", nil
}

// copyFunc is func(msg M) M of body, which changes the copy v (copyOf),
// then returns it.
func (e emitter) copyFunc(v string, body []jen.Code) jen.Code {
	h := e.H
	if h.Msg.Kind == model.Pointer {
		body = append(body, jen.Return(jen.Op("&").Id("v")))
	} else {
		body = append(body, jen.Return(jen.Id(v)))
	}
	return jen.Func().Params(jen.Id("msg").Add(gocode.Type(h.Msg))).Add(gocode.Type(h.Msg)).Block(body...)
}

func (e emitter) recvType() jen.Code {
	r := e.H.Recv
	switch {
	case r == nil:
		return jen.Qual(gocode.IdemtestPkg, "NoReceiver")
	case r.Pointer:
		return jen.Op("*").Id(r.Type)
	}
	return jen.Id(r.Type)
}

func (e emitter) resultType() jen.Code {
	if e.H.Result == nil {
		return jen.Qual(gocode.IdemPkg, "None")
	}
	return gocode.Type(*e.H.Result)
}

// migrationsDir is the handler's migrations folder relative to the package,
// where go test runs the test.
func (e emitter) migrationsDir() string {
	rel, err := filepath.Rel(e.Pkg.Dir, e.H.MigrationsDir)
	if err != nil {
		rel = e.H.MigrationsDir
	}
	return filepath.ToSlash(rel)
}

// doc says what the test proves, against which table, with which N.
func (e emitter) doc() string {
	h, n := e.H, e.N
	d := &docText{}
	source := "its receiver and message come from " + h.Fixture + ", called once per scenario"
	if h.Fixture == "" {
		source = "its message is built with random values in its key fields and zero values elsewhere, and its receiver is " + e.zeroReceiverText()
	}
	d.para(fmt.Sprintf(
		"%s proves against a real PostgreSQL that %s, the wrapper of %s, processes every %s at most once per key (%s) of the consumer %q, "+
			"whose inbox table is %s. Each scenario is a subtest in a fresh schema with the goose migrations of %s applied; %s:",
		n.Test, n.Wrapper, gocode.HandlerName(e.H), gocode.MessageName(h, e.Pkg.Path), gocode.KeyPaths(e.H), h.Consumer, h.Table, e.migrationsDir()+"/", source))

	d.item(fmt.Sprintf(
		"concurrent_deliveries: %d deliveries of one message at once, the first held inside its transaction until the other %d wait on its claim in PostgreSQL, "+
			"give exactly one idem.Processed and %d idem.Duplicate with equal results, and one inbox row;", Deliveries, Deliveries-1, Deliveries-1))
	d.item("failure_before_commit: a delivery whose connection dies after the handler ran and before the commit leaves no inbox row, and the redelivery is processed once;")
	d.item("crash_after_commit: when a worker commits a delivery and dies before its ack, the redelivery to a new worker is idem.Duplicate with the stored result and does not run the handler;")
	reused := "key_reused: a message with the same key and another payload gets idem.ErrKeyReused and changes nothing;"
	switch {
	case h.Vary != nil && h.Fixture != "":
		d.item(reused + fmt.Sprintf(" that message is the fixture's Variant or, without one, the message with %s changed;", h.Vary.Field))
	case h.Vary != nil:
		d.item(reused + fmt.Sprintf(" that message has %s changed;", h.Vary.Field))
	case h.Fixture != "":
		d.item(fmt.Sprintf("key_reused, when %s supplies a Variant (%s): a message with the same key and another payload gets idem.ErrKeyReused and changes nothing;", h.Fixture, h.NoVary))
	}
	d.item("sequential_duplicate: a second delivery of the message is idem.Duplicate with the first one's result;")
	if h.Fixture != "" {
		d.item(fmt.Sprintf("business_unique_violation, when %s supplies a Conflict: a unique violation of the handler's own write is its error, never idem.Duplicate, and records nothing.", h.Fixture))
		d.para(fmt.Sprintf("When %s supplies an Effect, its count of the business effect must be exactly 1 after each scenario "+
			"(0 after the abandoned delivery, and unchanged by the failed one of business_unique_violation).", h.Fixture))
	} else {
		d.items[len(d.items)-1] = strings.TrimSuffix(d.items[len(d.items)-1], ";") + "."
		if h.Vary == nil {
			d.para("key_reused is not run: " + h.NoVary + ".")
		}
		d.para(fmt.Sprintf("The business effect is not counted. A fixture can seed data, choose the message, count the effect and supply a Variant "+
			"(see idemtest.Fixture): declare it in a _test.go file of package %s,", e.Pkg.Name))
		d.code(signature(fixtureName(h.Func), []string{"t testing.TB", "db *idemtest.DB"},
			fmt.Sprintf("idemtest.Fixture[%s, %s]", e.recvText(), gocode.TypeText(h.Msg, e.Pkg.Path))))
		d.para(fmt.Sprintf("and add fixture=%s to the //idem:handler directive of %s.", fixtureName(h.Func), h.Func))
	}
	if h.Outbox {
		failed := "after the abandoned delivery"
		if h.Fixture != "" {
			failed += ", and after the failed one of business_unique_violation"
		}
		d.para(fmt.Sprintf("%s publishes through the outbox, so every scenario also checks idem_outbox: no row while the change has not committed "+
			"(%s); once it committed, the rows of one run, at least one, "+
			"whose message ids are idem.OutgoingMessageID(%q, key, 0..n-1), the ids a rerun after the failure before commit computes too; "+
			"and no duplicate adds a row.", h.Func, failed, h.Consumer))
	}
	how := "one transaction per batch"
	d.para(fmt.Sprintf("The batch scenarios deliver through %s.HandleBatch (%s): "+
		"batch_key_twice: a batch holding the message twice (and, with a Variant, its key with another payload) runs the handler once: "+
		"idem.Processed, idem.Duplicate with an equal result, idem.ErrKeyReused; "+
		"batch_processed_key: a batch of an already processed message gives idem.Duplicate with the stored result and does not run the handler; "+
		"batch_failing_handler: a batch whose transaction fails before its commit gets the error for each message and commits nothing, and the redelivered batch is processed once; "+
		"batch_concurrent: %d batches holding the message twice at once give exactly one idem.Processed, the rest idem.Duplicate with equal results; "+
		"batch_killed_mid_batch: a child process delivering the message twice as a batch is killed with SIGKILL inside the batch's transaction, after the handler and before the COMMIT: "+
		"nothing is recorded, and the redelivered batch is processed once.",
		n.Wrapper, how, Deliveries))
	if h.Set {
		d.para(fmt.Sprintf("%s is set-based, so the batch scenarios also give it messages of several keys (Rekey: the message with fresh key values) "+
			"and wrap it (SetWith): batch_fresh_messages: after the message was processed, a batch of it, a new key, it again, "+
			"its key with another payload and a third key calls %s once, with the two new keys' messages in input order; "+
			"batch_overlapping: %d batches at once of two keys out of three, overlapping and in different orders, "+
			"process each key exactly once without an error; "+
			"batch_each_alone: a batch of two keys whose handler fails is rolled back and each message is then delivered alone, "+
			"as a batch of one, and processed; "+
			"batch_wrong_length: a handler that returns one result too many fails each message with an error naming %s and both lengths, "+
			"and commits nothing.", h.Func, h.Func, Deliveries, gocode.HandlerName(h)))
		if e.rekey() == nil {
			d.para("These four are not run: every key part is nullable or reached through a pointer, " +
				"so no message of another key can be made from the fixture's.")
		}
	}
	if p := h.Partition; p != nil {
		d.para(fmt.Sprintf("The inbox is partitioned by the %s of %s, so every scenario first keeps its partitions as the janitor does "+
			"and times its message now (unless the fixture gave it a time), and the partition scenarios run: "+
			"bucket_edge: a message timed one microsecond before the start of a %s and one timed at it each land in their own bucket's partition, "+
			"are processed once and then idem.Duplicate; "+
			"bucket_edge_concurrent: %d deliveries at once of the message timed at the start of a %s give exactly one idem.Processed, "+
			"the rest idem.Duplicate, one row in that bucket's partition; "+
			"redelivery_after_drop: once the janitor dropped the partition of a processed message (its %s wholly past the retention), "+
			"its redelivery gets idem.ErrOutsideWindow and does not run the handler, whether the consumer's clock refuses it or the database finds no partition for it, "+
			"alone and as a batch.",
			p.Bucket, p.Time.Path, p.Bucket, Deliveries, p.Bucket, p.Bucket))
	}
	d.para("Without IDEMGEN_TEST_DATABASE_URL (DATABASE_URL is never used) the test is skipped, and with IDEMGEN_REQUIRE_DB set it fails instead; " +
		fmt.Sprintf("IDEMGEN_TEST_DELIVERIES sets another number of concurrent deliveries than %d.", Deliveries))
	return d.String()
}

func (e emitter) zeroReceiverText() string {
	r := e.H.Recv
	switch {
	case r == nil:
		return "none (a plain function)"
	case r.Pointer && r.Struct:
		return "&" + r.Type + "{}"
	case r.Pointer:
		return "new(" + r.Type + ")"
	case r.Struct:
		return r.Type + "{}"
	}
	return "the zero " + r.Type
}

func (e emitter) recvText() string {
	r := e.H.Recv
	switch {
	case r == nil:
		return "idemtest.NoReceiver"
	case r.Pointer:
		return "*" + r.Type
	}
	return r.Type
}

// fixtureName suggests the name of a handler's fixture: Charge →
// chargeFixture.
func fixtureName(fn string) string {
	return strings.ToLower(fn[:1]) + fn[1:] + "Fixture"
}

// docText builds a doc comment of paragraphs, list items and code lines, in
// the form gofmt gives doc comments, wrapped at 80 columns.
type docText struct {
	blocks []string
	items  []string // the list being built
}

func (d *docText) para(text string) {
	d.flush()
	d.blocks = append(d.blocks, wrap(text, "// ", "// "))
}

func (d *docText) item(text string) { d.items = append(d.items, text) }

// code adds a code block to the doc: each line of text indented.
func (d *docText) code(text string) {
	d.flush()
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		lines[i] = "//\t" + line
	}
	d.blocks = append(d.blocks, strings.Join(lines, "\n"))
}

// signature is a function's signature as a doc's code block shows it: on
// one line when that fits in gocode.Width, else one parameter a line.
func signature(name string, params []string, result string) string {
	line := "func " + name + "(" + strings.Join(params, ", ") + ") " + result
	if len("//\t"+line) <= gocode.Width {
		return line
	}
	return "func " + name + "(\n\t" + strings.Join(params, ",\n\t") + ",\n) " + result
}

func (d *docText) flush() {
	if len(d.items) == 0 {
		return
	}
	var lines []string
	for _, it := range d.items {
		lines = append(lines, wrap(it, "//   - ", "//     "))
	}
	d.blocks = append(d.blocks, strings.Join(lines, "\n"))
	d.items = nil
}

func (d *docText) String() string {
	d.flush()
	return strings.Join(d.blocks, "\n//\n")
}

// wrap fills text into lines of at most 80 columns, the first starting with
// first and the others with rest.
func wrap(text, first, rest string) string {
	const width = 80
	var lines []string
	line := first
	empty := true
	for _, word := range strings.Fields(text) {
		if !empty && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line, empty = rest, true
		}
		if !empty {
			line += " "
		}
		line += word
		empty = false
	}
	lines = append(lines, line)
	return strings.Join(lines, "\n")
}
