package migrate

import (
	"bytes"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/diag"
	"github.com/idemgen/idemgen/internal/model"
	"github.com/idemgen/idemgen/internal/output"
)

const folder = "/repo/migrations"

func inbox(consumer string, parts ...model.Column) model.Inbox {
	return model.Inbox{Consumer: consumer, Table: "idem_" + strings.ReplaceAll(consumer, ".", "_"), Unique: model.PrimaryKey, Result: model.ResultJSON, Key: parts}
}

var keyID = col("key_id", "text", false)

// plan plans d for req and returns the files of the folder it wants (base
// names) and the messages of its diagnostics.
func plan(d Dir, req Request) (map[string][]byte, []string) {
	set, diags := output.NewSet(), &diag.List{}
	if req.Kinds == nil {
		req.Kinds = []Kind{testInbox}
	}
	d.Plan(req, set, diags)
	files := map[string][]byte{}
	for path, content := range set.Files {
		files[filepath.Base(path)] = content
	}
	var msgs []string
	for _, m := range diags.Sorted() {
		msgs = append(msgs, m.Msg)
	}
	return files, msgs
}

// dirOf is the folder holding files.
func dirOf(files map[string][]byte) Dir {
	d := Dir{Path: folder}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		switch name {
		case SumFile:
			d.Sum = files[name]
		case ResultsFile:
			d.Results = files[name]
		default:
			d.Files = append(d.Files, File{Name: name, Version: Version(name), Content: files[name]})
		}
	}
	return d
}

func want(in model.Inbox, owner string) Want {
	return Want{Kind: testInbox, Name: in.Consumer, State: in, Owner: owner}
}

func names(files map[string][]byte) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if name != SumFile && name != ResultsFile {
			out = append(out, name)
		}
	}
	return out
}

func hasMsg(msgs []string, part string) bool {
	return slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, part) })
}

// TestPlanChains: new chains take the versions after the folder's highest, in
// consumer order; a re-run changes nothing; an additive change appends one
// migration to its chain only; the checksum file records every migration and
// the owner of each inbox.
func TestPlanChains(t *testing.T) {
	user := map[string][]byte{"00001_accounts.sql": []byte("-- +goose Up\nCREATE TABLE accounts ();\n")}
	pkgs := []string{"example.com/app"}
	req := Request{Packages: pkgs, Wants: []Want{
		want(inbox("app.b", keyID), "example.com/app"),
		want(inbox("app.a", keyID), "example.com/app"),
	}}
	files, msgs := plan(dirOf(user), req)
	if len(msgs) > 0 {
		t.Fatalf("diagnostics: %q", msgs)
	}
	if got := names(files); !slices.Equal(got, []string{"00002_idem_app_a.sql", "00003_idem_app_b.sql"}) {
		t.Fatalf("files %q; want app.a at 2 and app.b at 3 (the user's migration is not rewritten)", got)
	}
	sum := string(files[SumFile])
	for _, line := range []string{"00001_accounts.sql " + hashOf(user["00001_accounts.sql"]) + "\n",
		"00002_idem_app_a.sql " + hashOf(files["00002_idem_app_a.sql"]) + " consumer=app.a package=example.com/app\n"} {
		if !strings.Contains(sum, line) {
			t.Errorf("%s lacks %q:\n%s", SumFile, line, sum)
		}
	}

	planned := maps.Clone(files)
	maps.Copy(files, user)
	again, msgs := plan(dirOf(files), req)
	if len(msgs) > 0 || !maps.EqualFunc(again, planned, bytes.Equal) {
		t.Fatalf("a re-run changed the folder: %q, %q", names(again), msgs)
	}

	grown := inbox("app.b", keyID, col("key_x", "bigint", true))
	grown.Unique = model.PartialIndexes
	req.Wants[0] = want(grown, "example.com/app")
	next, msgs := plan(dirOf(files), req)
	if len(msgs) > 0 {
		t.Fatalf("diagnostics: %q", msgs)
	}
	added := "00004_idem_app_b_add_key_x.sql"
	if got := names(next); !slices.Equal(got, []string{"00002_idem_app_a.sql", "00003_idem_app_b.sql", added}) {
		t.Fatalf("files %q; want one more, %s", got, added)
	}
	if consumer, state, _, _ := testInbox.Read(next[added]); consumer != "app.b" || SchemaLine(state.(model.Inbox)) != SchemaLine(grown) {
		t.Errorf("%s records %s %v", added, consumer, state)
	}
}

// TestPlanRefusals: what the planner refuses, with the message that says so.
func TestPlanRefusals(t *testing.T) {
	const app, other = "example.com/app", "example.com/other"
	a := inbox("app.a", keyID)
	start, _ := plan(dirOf(nil), Request{Packages: []string{app}, Wants: []Want{want(a, app)}})
	first := "00001_idem_app_a.sql"
	edit := func(name, content string) map[string][]byte {
		files := maps.Clone(start)
		files[name] = []byte(content)
		return files
	}
	renamed := a
	renamed.Table = "idem_renamed"
	for _, c := range []struct {
		name  string
		files map[string][]byte
		req   Request
		msg   string
	}{
		{"destructive change", start, Request{Packages: []string{app}, Wants: []Want{want(renamed, app)}},
			"consumer app.a cannot keep its inbox (migration 00001_idem_app_a.sql): its inbox table changed"},
		{"edited migration", edit(first, string(start[first])+"-- more\n"), Request{Packages: []string{app}, Wants: []Want{want(a, app)}},
			"migration 00001_idem_app_a.sql changed after it was recorded in idemgen.sum"},
		{"deleted migration", func() map[string][]byte { f := maps.Clone(start); delete(f, first); return f }(), Request{Packages: []string{app}},
			"migration 00001_idem_app_a.sql, recorded in idemgen.sum, was deleted"},
		{"damaged header", edit(first, Header+"\n"+InboxMarker+"app.a\n-- idemgen:schema table=idem_app_a\n"), Request{Packages: []string{app}, Rehash: true},
			"the idemgen header of 00001_idem_app_a.sql is damaged (incomplete schema line"},
		{"not what idemgen wrote", edit(first, string(start[first])+"SELECT 1;\n"), Request{Packages: []string{app}, Wants: []Want{want(a, app)}, Rehash: true},
			"migration 00001_idem_app_a.sql of consumer app.a is not what idemgen wrote"},
		{"shared version", edit("00001_accounts.sql", "-- +goose Up\n"), Request{Packages: []string{app}, Rehash: true},
			"migrations 00001_accounts.sql and 00001_idem_app_a.sql share version 1"},
		{"below the recorded history", edit("00001_a_late.sql", "-- +goose Up\n"), Request{Packages: []string{app}, Wants: []Want{want(a, app)}},
			"migration 00001_a_late.sql (version 1) is new but not newer than the recorded history (up to version 1)"},
		{"damaged sum", edit(SumFile, "h1:x\n"), Request{Packages: []string{app}, Wants: []Want{want(a, app)}},
			"idemgen.sum is damaged: its first line does not match"},
		{"removed consumer", start, Request{Packages: []string{app}},
			"consumer app.a of package example.com/app has no handler any more"},
		{"owned elsewhere", start, Request{Packages: []string{other}, Wants: []Want{want(a, other)}},
			"consumer app.a belongs to package example.com/app"},
	} {
		_, msgs := plan(dirOf(c.files), c.req)
		if !hasMsg(msgs, c.msg) {
			t.Errorf("%s: diagnostics %q; want one containing %q", c.name, msgs, c.msg)
		}
	}
}

// TestPlanOwnership: a retired consumer may lose its handler and be taken
// over by another package; its migrations stay, recorded as retired.
func TestPlanOwnership(t *testing.T) {
	const app, other = "example.com/app", "example.com/other"
	a := inbox("app.a", keyID)
	start, _ := plan(dirOf(nil), Request{Packages: []string{app}, Wants: []Want{want(a, app)}})
	retired, msgs := plan(dirOf(start), Request{Packages: []string{app}, Retired: []Retired{{Consumer: "app.a", Package: app}}})
	if len(msgs) > 0 || !strings.Contains(string(retired[SumFile]), " consumer=app.a package=example.com/app retired\n") {
		t.Fatalf("retiring: %q\n%s", msgs, retired[SumFile])
	}
	moved, msgs := plan(dirOf(retired), Request{Packages: []string{other}, Wants: []Want{want(a, other)}})
	if len(msgs) > 0 || !strings.Contains(string(moved[SumFile]), " consumer=app.a package=example.com/other\n") || len(names(moved)) != 1 {
		t.Fatalf("taking over: %q %q\n%s", msgs, names(moved), moved[SumFile])
	}
	// A folder recorded before owners were: the owner is unknown, and
	// anyone may take the consumer.
	noSum := maps.Clone(start)
	delete(noSum, SumFile)
	unknown, _ := plan(dirOf(noSum), Request{})
	if !strings.Contains(string(unknown[SumFile]), " consumer=app.a package=unknown\n") {
		t.Errorf("without an owner:\n%s", unknown[SumFile])
	}
}

// TestPlanResults: the record of result shapes is written for the consumers
// that store a result, and a change the stored results cannot be decoded
// through is refused unless accepted.
func TestPlanResults(t *testing.T) {
	num := &model.Shape{Kind: model.JSONObject, Fields: map[string]*model.Shape{"Cents": {Kind: model.JSONNumber}}}
	str := &model.Shape{Kind: model.JSONObject, Fields: map[string]*model.Shape{"Cents": {Kind: model.JSONString}}}
	files, msgs := plan(dirOf(nil), Request{Results: []Result{{Consumer: "app.a", Shape: num}, {Consumer: "app.b"}}})
	if len(msgs) > 0 || string(files[ResultsFile]) != resultsHeader+"app.a $ object\napp.a $.Cents number\n" {
		t.Fatalf("record: %q\n%s", msgs, files[ResultsFile])
	}
	_, msgs = plan(dirOf(files), Request{Results: []Result{{Consumer: "app.a", Shape: str}}})
	if !hasMsg(msgs, "the result of consumer app.a changed in a way the results its inbox stored before cannot be decoded through") {
		t.Errorf("kind change: %q", msgs)
	}
	accepted, msgs := plan(dirOf(files), Request{Results: []Result{{Consumer: "app.a", Shape: str}}, AcceptResultChange: []string{"app.a"}})
	if len(msgs) > 0 || !strings.Contains(string(accepted[ResultsFile]), "app.a $.Cents string\n") {
		t.Errorf("accepted: %q\n%s", msgs, accepted[ResultsFile])
	}
	if _, msgs := plan(dirOf(files), Request{Results: []Result{{Consumer: "app.a", Shape: num}}, AcceptResultChange: []string{"app.a"}}); !hasMsg(msgs, "accepts nothing") {
		t.Errorf("needless accept: %q", msgs)
	}
	if none, _ := plan(dirOf(nil), Request{}); none[ResultsFile] != nil {
		t.Errorf("a record was written with no result: %s", none[ResultsFile])
	}
}

// fixedKind is a chain like the outbox's: the runtime's own migrations,
// copied in order; its State is how many of them a folder has.
type fixedKind struct{ steps []string }

const fixedMarker = "-- idemgen:fixed step="

func (fixedKind) Name() string { return "outbox" }
func (fixedKind) Owned() bool  { return false }

func (fixedKind) Read(content []byte) (string, State, bool, error) {
	rest, ok := bytes.CutPrefix(content, []byte(fixedMarker))
	if !ok {
		return "", nil, false, nil
	}
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	n, err := strconv.Atoi(string(line))
	if err != nil {
		return "idem_outbox", nil, true, fmt.Errorf("step %q", line)
	}
	return "idem_outbox", n, true, nil
}

func (k fixedKind) Evolve(current, want State) ([]State, error) {
	cur, _ := current.(int)
	if cur > want.(int) {
		return nil, fmt.Errorf("the folder has %d outbox migrations, this idemgen knows %d", cur, want.(int))
	}
	var steps []State
	for n := cur + 1; n <= want.(int); n++ {
		steps = append(steps, n)
	}
	return steps, nil
}

func (k fixedKind) Render(prev, next State) (string, []byte, error) {
	p, _ := prev.(int)
	n := next.(int)
	if n != p+1 || n > len(k.steps) {
		return "", nil, fmt.Errorf("no step from %d to %d", p, n)
	}
	return fmt.Sprintf("idem_outbox_%d", n), []byte(fmt.Sprintf("%s%d\n%s", fixedMarker, n, k.steps[n-1])), nil
}

// TestPlanAnotherKind: a kind of chain that is not owned, like the outbox's,
// joins a folder of inboxes through the Kind interface alone: its
// migrations take the next versions after the inboxes', each step one file,
// the checksum file records its chain, a re-run changes nothing, an edit is
// caught and a folder ahead of the runtime is refused.
func TestPlanAnotherKind(t *testing.T) {
	outbox := fixedKind{steps: []string{"-- +goose Up\nCREATE TABLE idem_outbox ();\n", "-- +goose Up\nALTER TABLE idem_outbox;\n", "-- +goose Up\nSELECT 3;\n"}}
	const app = "example.com/app"
	req := Request{Kinds: []Kind{testInbox, outbox}, Packages: []string{app}, Wants: []Want{
		{Kind: outbox, Name: "idem_outbox", State: 2},
		want(inbox("app.a", keyID), app),
	}}
	files, msgs := plan(dirOf(nil), req)
	if len(msgs) > 0 {
		t.Fatalf("diagnostics: %q", msgs)
	}
	if got := names(files); !slices.Equal(got, []string{"00001_idem_app_a.sql", "00002_idem_outbox_1.sql", "00003_idem_outbox_2.sql"}) {
		t.Fatalf("files %q; want the inbox, then the outbox's two steps", got)
	}
	if sum := string(files[SumFile]); !strings.Contains(sum, "00003_idem_outbox_2.sql "+hashOf(files["00003_idem_outbox_2.sql"])+" chain=outbox/idem_outbox\n") {
		t.Errorf("%s:\n%s", SumFile, sum)
	}
	if again, msgs := plan(dirOf(files), req); len(msgs) > 0 || !maps.EqualFunc(again, files, bytes.Equal) {
		t.Fatalf("a re-run changed the folder: %q, %q", names(again), msgs)
	}
	req.Wants[0].State = 3
	next, msgs := plan(dirOf(files), req)
	if len(msgs) > 0 || len(names(next)) != 4 || next["00004_idem_outbox_3.sql"] == nil {
		t.Fatalf("one step more: %q, %q", names(next), msgs)
	}
	req.Wants[0].State = 1
	if _, msgs := plan(dirOf(files), req); !hasMsg(msgs, "the outbox chain idem_outbox cannot keep its tables (migration 00003_idem_outbox_2.sql): the folder has 2 outbox migrations") {
		t.Errorf("folder ahead: %q", msgs)
	}
	edited := maps.Clone(files)
	edited["00002_idem_outbox_1.sql"] = append(slices.Clone(files["00002_idem_outbox_1.sql"]), "SELECT 1;\n"...)
	delete(edited, SumFile)
	if _, msgs := plan(dirOf(edited), req); !hasMsg(msgs, "migration 00002_idem_outbox_1.sql of the outbox chain idem_outbox is not what idemgen wrote") {
		t.Errorf("edited step: %q", msgs)
	}
	// Without a want, the chain stays: it is the folder's, not a package's.
	if _, msgs := plan(dirOf(files), Request{Kinds: req.Kinds, Packages: []string{app}, Wants: req.Wants[1:]}); len(msgs) > 0 {
		t.Errorf("an unwanted outbox chain: %q", msgs)
	}
}
