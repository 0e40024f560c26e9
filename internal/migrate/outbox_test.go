package migrate

import (
	"bytes"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/idemgen/idemgen/migrations"
)

// runtimeOutbox returns the outbox kind of a runtime whose chain is the
// first migration of migrations.FS and, with extra, of a runtime that gained
// those migrations: the mechanics of the chain, whatever the number of
// migrations the runtime has by now (TestOutboxKindCopiesTheChain copies the
// whole of it).
func runtimeOutbox(t *testing.T, extra fstest.MapFS) OutboxKind {
	t.Helper()
	src := fstest.MapFS{}
	for _, name := range []string{"00001_idem_outbox.sql"} {
		data, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		src[name] = &fstest.MapFile{Data: data}
	}
	maps.Copy(src, extra)
	k, err := NewOutboxKind(src)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestOutboxKind: the runtime's migrations are copied byte for byte after the
// folder's inbox, once; a runtime migration that arrives later is the next
// version; an edited copy is refused with and without the checksum file; a
// folder ahead of the runtime is refused; a folder whose handlers stopped
// publishing keeps the chain.
func TestOutboxKind(t *testing.T) {
	const app = "example.com/app"
	outbox := runtimeOutbox(t, nil)
	first, err := fs.ReadFile(migrations.FS, "00001_idem_outbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	req := func(k OutboxKind, wantOutbox bool, consumers ...string) Request {
		r := Request{Kinds: []Kind{testInbox, k}, Packages: []string{app}}
		for _, c := range consumers {
			r.Wants = append(r.Wants, want(inbox(c, keyID), app))
		}
		if wantOutbox {
			r.Wants = append(r.Wants, Want{Kind: k, Name: OutboxChain, State: k.Steps()})
		}
		return r
	}

	files, msgs := plan(dirOf(nil), req(outbox, true, "app.a"))
	if len(msgs) > 0 || !slices.Equal(names(files), []string{"00001_idem_app_a.sql", "00002_idem_outbox.sql"}) {
		t.Fatalf("first: %q, %q", names(files), msgs)
	}
	if !bytes.Equal(files["00002_idem_outbox.sql"], first) {
		t.Errorf("the copy is not the runtime's migration byte for byte:\n%s", files["00002_idem_outbox.sql"])
	}
	if !strings.Contains(string(files[SumFile]), "00002_idem_outbox.sql "+hashOf(first)+" chain=outbox/idem_outbox\n") {
		t.Errorf("%s:\n%s", SumFile, files[SumFile])
	}

	second, msgs := plan(dirOf(files), req(outbox, true, "app.a", "app.b"))
	if len(msgs) > 0 || !slices.Equal(names(second), []string{"00001_idem_app_a.sql", "00002_idem_outbox.sql", "00003_idem_app_b.sql"}) {
		t.Fatalf("a second handler: %q, %q", names(second), msgs)
	}

	step2 := []byte(migrations.Marker + "\n-- +goose Up\nSELECT 2;\n-- +goose Down\nSELECT 2;\n")
	newer := runtimeOutbox(t, fstest.MapFS{"00002_idem_outbox_more.sql": {Data: step2}})
	grown, msgs := plan(dirOf(files), req(newer, true, "app.a"))
	if len(msgs) > 0 || !bytes.Equal(grown["00003_idem_outbox_more.sql"], step2) || !bytes.Equal(grown["00002_idem_outbox.sql"], first) {
		t.Fatalf("a runtime migration arrives: %q, %q", names(grown), msgs)
	}
	if _, msgs := plan(dirOf(grown), req(outbox, true, "app.a")); !hasMsg(msgs, "migration 00003_idem_outbox_more.sql of the outbox chain idem_outbox is not what idemgen wrote (it was edited, or copied by a newer idemgen: this idemgen's runtime has 1 outbox migration(s), and it would be number 2)") {
		t.Errorf("folder ahead of the runtime: %q", msgs)
	}

	edited := maps.Clone(files)
	edited["00002_idem_outbox.sql"] = bytes.Replace(first, []byte("attempts     integer"), []byte("attempts     bigint "), 1)
	if _, msgs := plan(dirOf(edited), req(outbox, true, "app.a")); !hasMsg(msgs, "migration 00002_idem_outbox.sql changed after it was recorded in idemgen.sum") {
		t.Errorf("edited copy: %q", msgs)
	}
	rehashed := req(outbox, true, "app.a")
	rehashed.Rehash = true
	if _, msgs := plan(dirOf(edited), rehashed); !hasMsg(msgs, "migration 00002_idem_outbox.sql of the outbox chain idem_outbox is not what idemgen wrote") {
		t.Errorf("edited copy, rehashed: %q", msgs)
	}

	kept, msgs := plan(dirOf(files), req(outbox, false, "app.a"))
	if len(msgs) > 0 || !maps.EqualFunc(kept, files, bytes.Equal) {
		t.Errorf("stopped publishing: %q, %q", names(kept), msgs)
	}
}

// TestOutboxKindCopiesTheChain: the runtime's whole chain (the table, delete
// on publish, the compact claim) is copied byte for byte after the folder's inbox, in
// its order, and recorded in idemgen.sum.
func TestOutboxKindCopiesTheChain(t *testing.T) {
	const app = "example.com/app"
	k, err := NewOutboxKind(migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	r := Request{Kinds: []Kind{testInbox, k}, Packages: []string{app},
		Wants: []Want{want(inbox("app.a", keyID), app), {Kind: k, Name: OutboxChain, State: k.Steps()}}}
	files, msgs := plan(dirOf(nil), r)
	copies := map[string]string{"00002_idem_outbox.sql": "00001_idem_outbox.sql",
		"00003_idem_outbox_delete_on_publish.sql": "00002_idem_outbox_delete_on_publish.sql",
		"00004_idem_outbox_compact_claim.sql":     "00003_idem_outbox_compact_claim.sql"}
	if len(msgs) > 0 || !slices.Equal(names(files), []string{"00001_idem_app_a.sql", "00002_idem_outbox.sql",
		"00003_idem_outbox_delete_on_publish.sql", "00004_idem_outbox_compact_claim.sql"}) {
		t.Fatalf("%q, %q", names(files), msgs)
	}
	for copied, name := range copies {
		data, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(files[copied], data) {
			t.Errorf("%s is not %s byte for byte", copied, name)
		}
		if !strings.Contains(string(files[SumFile]), copied+" "+hashOf(data)+" chain=outbox/idem_outbox\n") {
			t.Errorf("%s has no line for %s:\n%s", SumFile, copied, files[SumFile])
		}
	}
}

// TestNewOutboxKind: the runtime's folder must hold goose migrations that
// carry the marker.
func TestNewOutboxKind(t *testing.T) {
	for name, src := range map[string]fstest.MapFS{
		"no .sql file":     {},
		"is not named":     {"idem_outbox.sql": {Data: []byte(migrations.Marker + "\n-- +goose Up\n")}},
		"has no \"-- idem": {"00001_idem_outbox.sql": {Data: []byte("-- +goose Up\n" + migrations.Marker + "\n")}},
	} {
		if _, err := NewOutboxKind(src); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestOutboxCopyWithOtherComments: a copy whose comments differ from the
// runtime's (an older idemgen's wording) is still the runtime's migration;
// a copy whose SQL differs is edited.
func TestOutboxCopyWithOtherComments(t *testing.T) {
	outbox := runtimeOutbox(t, nil)
	first, err := fs.ReadFile(migrations.FS, "00001_idem_outbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	older := strings.Replace(string(first), migrations.Marker+"\n", migrations.Marker+"\n-- An older header,\n--\n-- written over several lines.\n", 1)
	older = strings.Replace(older, "CREATE TABLE idem_outbox (", "CREATE TABLE idem_outbox (\n    -- a column's comment of its own", 1)
	if _, state, ok, err := outbox.Read([]byte(older)); !ok || err != nil || state != OutboxSteps(1) {
		t.Errorf("a copy with other comments: Read = %v, %v, %v; want step 1", state, ok, err)
	}
	edited := strings.Replace(string(first), "payload      bytea", "payload      text ", 1)
	if _, state, ok, err := outbox.Read([]byte(edited)); !ok || err != nil || state != (outboxEdited{}) {
		t.Errorf("a copy with other SQL: Read = %v, %v, %v; want an edited copy", state, ok, err)
	}
}
