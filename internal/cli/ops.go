package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/internal/ops"
)

const outboxUsage = `Usage:
  idemgen outbox dead -db URL [-consumer C] [-schema S]
  idemgen outbox revive -db URL (-id ID[,ID...] ... | -all [-consumer C]) [-schema S]

dead lists the outbox rows dead-lettered after too many publish attempts, by
id. revive makes the rows given by id (-id, repeated or comma-separated), or
every dead row (-all, of one consumer with -consumer), due again at once:
attempts reset, the backoff cleared, the id kept, so that a relay in ordered
mode publishes an ordering key's rows in the order they were written. A row
whose key has earlier dead rows is revived only together with them. Both
print the rows, and refuse a server that is not a primary.

The outbox is the idem_outbox table the URL's search_path finds, as the relay
finds it; -schema names its schema instead.

Exit status: 0 done, 1 failed (nothing was changed), 2 bad command line.

Flags:
`

const claimsUsage = `Usage:
  idemgen claims -db URL [-consumer C] [-schema S]
  idemgen claims release -db URL -consumer C -key K [-schema S]

claims lists the running claims of the mode=external consumers: consumer,
key, attempts, fence, lease and age, the oldest first, in every claims table
of the database (found by the comment idemgen's migration gives it), or
those of -consumer and -schema. release releases one running claim, as the
sweeper does once its lease ran out, but at once: the next delivery of the
key claims it without waiting, and a worker still running it can no longer
record it done. K is the key as claims prints it, or the idempotency key.
Both print what they found or changed, and refuse a server that is not a
primary.

Exit status: 0 done, 1 failed (nothing was changed), 2 bad command line.

Flags:
`

// opsFlags are the flags every operator command has.
type opsFlags struct {
	db      string
	schema  string
	timeout time.Duration
}

func newOpsFlags(name, usage string, stderr io.Writer) (*flag.FlagSet, *opsFlags) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &opsFlags{}
	fs.StringVar(&o.db, "db", "", "the PostgreSQL `URL` (required), of the primary; a password in it is never printed")
	fs.DurationVar(&o.timeout, "timeout", time.Minute, "give up after `duration`")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	return fs, o
}

// parseOps parses args; code is -1 when the command goes on, else the exit
// code.
func parseOps(fs *flag.FlagSet, o *opsFlags, args []string, stderr io.Writer) (code int) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	if fs.NArg() > 0 {
		return opsUsage(stderr, fs.Name(), "unexpected argument %q", fs.Arg(0))
	}
	if o.db == "" {
		return opsUsage(stderr, fs.Name(), "-db URL is required")
	}
	if _, err := pgx.ParseConfig(o.db); err != nil {
		return opsUsage(stderr, fs.Name(), "-db: %s", redact(err.Error(), o.db))
	}
	return -1
}

func opsUsage(stderr io.Writer, name, format string, a ...any) int {
	fmt.Fprintf(stderr, "idemgen: "+strings.TrimPrefix(name, "idemgen ")+": "+format+"\n", a...)
	fmt.Fprintf(stderr, "Run '%s -h' for usage.\n", name)
	return ExitUsage
}

// connect opens a connection to o.db, the outbox's schema first on its
// search_path when searchPath is set. Its errors never hold the password.
func (o *opsFlags) connect(ctx context.Context, searchPath bool) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(o.db)
	if err != nil {
		return nil, fmt.Errorf("-db: %w", err)
	}
	if searchPath && o.schema != "" {
		cfg.RuntimeParams["search_path"] = pgx.Identifier{o.schema}.Sanitize()
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("-db: connect: %w", err)
	}
	return conn, nil
}

// opsFail prints err, with the password of the URL db masked, and returns
// ExitFail.
func opsFail(stderr io.Writer, db string, err error) int {
	fmt.Fprintln(stderr, "idemgen:", redact(err.Error(), db))
	return ExitFail
}

// outboxCmd runs idemgen outbox dead and idemgen outbox revive.
func (r runner) outboxCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "dead" && args[0] != "revive") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(stdout, strings.TrimSuffix(outboxUsage, "Flags:\n"))
			fmt.Fprintln(stdout, "Run 'idemgen outbox dead -h' or 'idemgen outbox revive -h' for the flags of each.")
			return ExitOK
		}
		fmt.Fprintln(stderr, "idemgen: outbox: want a command: dead (list the dead rows) or revive (make them due again)")
		fmt.Fprintln(stderr, "Run 'idemgen outbox -h' for usage.")
		return ExitUsage
	}
	sub := args[0]
	fs, o := newOpsFlags("idemgen outbox "+sub, outboxUsage, stderr)
	fs.StringVar(&o.schema, "schema", "", "the `schema` of the idem_outbox table (default: the one the URL's search_path finds)")
	consumer := fs.String("consumer", "", "only the rows of `consumer` (with revive, only with -all)")
	var ids idList
	all := false
	if sub == "revive" {
		fs.Var(&ids, "id", "revive the dead rows with these `ids` (repeat the flag, or separate them by commas)")
		fs.BoolVar(&all, "all", false, "revive every dead row (of -consumer, when given)")
	}
	if code := parseOps(fs, o, args[1:], stderr); code >= 0 {
		return code
	}
	if sub == "revive" {
		switch {
		case all == (len(ids) > 0):
			return opsUsage(stderr, fs.Name(), "give -id ID... or -all (not both)")
		case *consumer != "" && !all:
			return opsUsage(stderr, fs.Name(), "-consumer selects rows with -all; with -id the ids alone do")
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	conn, err := o.connect(ctx, true)
	if err != nil {
		return opsFail(stderr, o.db, err)
	}
	defer conn.Close(context.Background())
	var out ops.Outbox
	if sub == "dead" {
		out, err = ops.Dead(ctx, conn, *consumer)
	} else {
		out, err = ops.Revive(ctx, conn, ops.Revival{IDs: ids, All: all, Consumer: *consumer})
	}
	if err != nil {
		return opsFail(stderr, o.db, err)
	}
	table := out.Schema + ".idem_outbox"
	of := ""
	if *consumer != "" {
		of = " of consumer " + *consumer
	}
	switch {
	case len(out.Rows) == 0 && sub == "dead":
		fmt.Fprintf(stdout, "no dead rows%s in %s\n", of, table)
	case len(out.Rows) == 0:
		fmt.Fprintf(stdout, "no dead rows%s in %s: nothing revived\n", of, table)
	case sub == "dead":
		fmt.Fprintf(stdout, "%d dead row(s)%s in %s, by id:\n", len(out.Rows), of, table)
		renderDead(stdout, out.Rows)
		fmt.Fprintf(stdout, "idemgen outbox revive -id %s (or -all) makes them due again\n", joinRowIDs(out.Rows))
	default:
		fmt.Fprintf(stdout, "revived %d dead row(s)%s in %s: each is due now, its attempts reset, its id kept (an ordering key's rows go out in id order); as they were:\n", len(out.Rows), of, table)
		renderDead(stdout, out.Rows)
	}
	return ExitOK
}

// renderDead writes dead rows as a table; ATTEMPTS are those a row had
// when it died.
func renderDead(w io.Writer, rows []ops.DeadRow) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCONSUMER\tKEY\tDESTINATION\tORDERING KEY\tATTEMPTS\tDEAD AT\tMESSAGE ID\tLAST ERROR")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.ID, r.Consumer, r.Key, r.Destination, dash(r.OrderingKey),
			r.Attempts, stamp(r.DeadAt), r.MessageID, dash(oneLine(r.LastError, 160)))
	}
	tw.Flush()
}

// claimsCmd runs idemgen claims and idemgen claims release.
func (r runner) claimsCmd(args []string, stdout, stderr io.Writer) int {
	release := len(args) > 0 && args[0] == "release"
	name := "idemgen claims"
	if release {
		name, args = "idemgen claims release", args[1:]
	}
	fs, o := newOpsFlags(name, claimsUsage, stderr)
	fs.StringVar(&o.schema, "schema", "", "look for claims tables in `schema` only (default: every schema)")
	consumer := fs.String("consumer", "", "the mode=external `consumer` (default: all of them; required by release)")
	key := ""
	if release {
		fs.StringVar(&key, "key", "", "the `key` of the claim to release, as idemgen claims prints it, or its idempotency key (required)")
	}
	if code := parseOps(fs, o, args, stderr); code >= 0 {
		return code
	}
	if release && (*consumer == "" || key == "") {
		return opsUsage(stderr, name, "-consumer and -key are required")
	}

	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	conn, err := o.connect(ctx, false)
	if err != nil {
		return opsFail(stderr, o.db, err)
	}
	defer conn.Close(context.Background())
	filter := ops.Filter{Schema: o.schema, Consumer: *consumer}
	if release {
		rel, err := ops.Release(ctx, conn, filter, key)
		if err != nil {
			return opsFail(stderr, o.db, err)
		}
		renderReleased(stdout, rel, r.clock(rel.Now))
		return ExitOK
	}
	cl, err := ops.Running(ctx, conn, filter)
	if err != nil {
		return opsFail(stderr, o.db, err)
	}
	renderClaims(stdout, cl, filter, r.clock(cl.Now))
	return ExitOK
}

// clock is the time ages are measured against: the runner's fixed time
// (tests), else the server's.
func (r runner) clock(server time.Time) time.Time {
	if !r.now.IsZero() {
		return r.now
	}
	return server
}

func renderClaims(w io.Writer, cl ops.Claims, f ops.Filter, now time.Time) {
	where := "the database"
	if f.Schema != "" {
		where = "schema " + f.Schema
	}
	if len(cl.Tables) == 0 {
		fmt.Fprintf(w, "no claims tables (mode=external consumers) in %s\n", where)
		return
	}
	tables := fmt.Sprintf("%d claims table(s) of %s (consumers: %s)", len(cl.Tables), where, strings.Join(ops.Consumers(cl.Tables), ", "))
	if len(cl.Running) == 0 {
		fmt.Fprintf(w, "no running claims at %s in %s\n", stamp(now), tables)
		return
	}
	fmt.Fprintf(w, "%d running claim(s) at %s in %s, by consumer, the oldest first:\n", len(cl.Running), stamp(now), tables)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CONSUMER\tKEY\tATTEMPTS\tFENCE\tLEASE UNTIL\tLEASE\tAGE\tIDEMPOTENCY KEY\tTABLE")
	for _, c := range cl.Running {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", c.Table.Consumer, c.Key, c.Attempts, c.Fence,
			leaseUntil(c.LeaseUntil), leaseState(c.LeaseUntil, now), age(now.Sub(c.CreatedAt)), c.IdemKey, c.Table)
	}
	tw.Flush()
	fmt.Fprintln(w, "idemgen claims release -consumer C -key K releases one, so that the next delivery takes it at once")
}

func renderReleased(w io.Writer, rel ops.Released, now time.Time) {
	c := rel.Claim
	fmt.Fprintf(w, "released the claim of consumer %s on key %s in %s (idempotency key %s):\n", c.Table.Consumer, c.Key, c.Table, c.IdemKey)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  status\trunning -> released\n")
	fmt.Fprintf(tw, "  attempts\t%d -> %d\n", c.Attempts, c.Attempts+1)
	fmt.Fprintf(tw, "  fence\t%d -> %d\n", c.Fence, c.Fence+1)
	lease := "none"
	if !c.LeaseUntil.IsZero() {
		lease = fmt.Sprintf("until %s (%s)", stamp(c.LeaseUntil), leaseState(c.LeaseUntil, now))
	}
	fmt.Fprintf(tw, "  lease\t%s -> none\n", lease)
	fmt.Fprintf(tw, "  age\t%s since the first claim\n", age(now.Sub(c.CreatedAt)))
	tw.Flush()
	fmt.Fprintln(w, "the next delivery of the key claims it at once; a worker still running it can no longer record it done")
}

func leaseUntil(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return stamp(t)
}

// leaseState says whether the lease ending at until is live at now.
func leaseState(until, now time.Time) string {
	switch {
	case until.IsZero():
		return "none"
	case until.After(now):
		return age(until.Sub(now)) + " left"
	}
	return "expired " + age(now.Sub(until)) + " ago"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine writes s on one line, cut after n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

func joinRowIDs(rows []ops.DeadRow) string {
	s := make([]string, len(rows))
	for i, r := range rows {
		s[i] = strconv.FormatInt(r.ID, 10)
	}
	return strings.Join(s, ",")
}

// idList is the value of -id: ids repeated or comma-separated.
type idList []int64

func (l *idList) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, id := range *l {
		s[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(s, ",")
}

func (l *idList) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		id, err := strconv.ParseInt(strings.TrimSpace(part), 10, 64)
		if err != nil || id <= 0 {
			return fmt.Errorf("%q is not an outbox row id (a positive integer)", part)
		}
		*l = append(*l, id)
	}
	return nil
}
