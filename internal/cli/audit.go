package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/internal/audit"
	"github.com/idemgen/idemgen/internal/load"
	"github.com/idemgen/idemgen/internal/model"
)

const auditUsage = `Usage: idemgen audit -db URL [flags] [packages]

Audit reads the database at URL (read-only, in one snapshot) and reports, for
every consumer of the packages (default "."): its inbox's row count, the oldest
row against its retention (retain=), running claims past their lease and
released claims (mode=external), rows with attempts > 1, and the outbox rows its
handler wrote that are pending or dead. With -table and -columns it also runs
the duplicate query on that business table:

  SELECT <columns>, count(*) FROM <table> [WHERE <time-column> >= now - <since>]
  GROUP BY <columns> HAVING count(*) > 1

Exit status: 0 no doubled work found, 1 doubled work found (the scheduled check
fails), 2 the audit could not run (bad flags or URL, packages that do not load,
a missing schema, table or column).

Flags:
`

// audit runs idemgen audit.
func (r runner) audit(dir string, args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("idemgen audit", flag.ContinueOnError)
	flags.SetOutput(stderr)
	db := flags.String("db", "", "the PostgreSQL `URL` to audit (required); a password in it is never printed")
	schema := flags.String("schema", "", "the `schema` unqualified table names are looked up in (default: the connection's current_schema())")
	table := flags.String("table", "", "the business `table` (name or schema.name) to look for doubled work in")
	cols := flags.String("columns", "", "comma-separated `columns` of -table whose values one piece of work writes once")
	timeCol := flags.String("time-column", "", "the timestamp `column` of -table that -since applies to")
	since := flags.Duration("since", 0, "look for doubled work in the rows of the last `duration` (with -time-column), e.g. 24h")
	limit := flags.Int("limit", audit.DefaultLimit, "list at most `n` doubled groups (the totals count them all)")
	asJSON := flags.Bool("json", false, "print the report as JSON")
	timeout := flags.Duration("timeout", 5*time.Minute, "give up after `duration`")
	flags.Usage = func() {
		fmt.Fprint(flags.Output(), auditUsage)
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "idemgen audit: "+format+"\n", a...)
		fmt.Fprintln(stderr, "Run 'idemgen audit -h' for usage.")
		return ExitUsage
	}
	if *db == "" {
		return usageErr("-db URL is required")
	}
	var dq *audit.DoublesQuery
	switch {
	case *table != "":
		if *cols == "" {
			return usageErr("-table %s needs -columns, the columns whose values one piece of work writes once", *table)
		}
		dq = &audit.DoublesQuery{Table: *table, TimeColumn: *timeCol, Since: *since, Limit: *limit}
		for _, c := range splitList(*cols) {
			if c = strings.TrimSpace(c); c == "" {
				return usageErr("-columns %q names an empty column", *cols)
			}
			dq.Columns = append(dq.Columns, c)
		}
		if *timeCol != "" && *since <= 0 {
			return usageErr("-time-column %s needs a positive -since (e.g. -since 24h)", *timeCol)
		}
		if *timeCol == "" && *since != 0 {
			return usageErr("-since needs -time-column, the column of %s the window applies to", *table)
		}
		if *limit <= 0 {
			return usageErr("-limit must be positive, not %d", *limit)
		}
	case *cols != "" || *timeCol != "" || *since != 0:
		return usageErr("-columns, -time-column and -since apply to a business table: name it with -table")
	}
	cfg, err := pgx.ParseConfig(*db)
	if err != nil {
		return fail(stderr, *db, fmt.Errorf("-db: %w", err))
	}

	prog, diags, err := load.Load(load.Config{Dir: dir, Patterns: flags.Args()})
	if err != nil {
		return fail(stderr, *db, err)
	}
	if diags.HasErrors() {
		diags.Print(stderr, dir)
		fmt.Fprintln(stderr, "idemgen audit: the packages do not load; nothing was audited")
		return ExitUsage
	}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	rep, err := runAudit(ctx, cfg, prog, audit.Config{Schema: *schema, Now: r.now, Doubles: dq})
	if err != nil {
		return fail(stderr, *db, err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(jsonReport(rep)); err != nil {
			return fail(stderr, *db, err)
		}
	} else {
		renderReport(stdout, rep)
	}
	if rep.Doubled() {
		fmt.Fprintf(stderr, "idemgen audit: doubled work: %d value(s) of %s in %s found in more than one row\n",
			rep.Doubles.Groups, strings.Join(rep.Doubles.Columns, ","), rep.Doubles.Table)
		return ExitFail
	}
	return ExitOK
}

// runAudit connects and audits in one read-only snapshot.
func runAudit(ctx context.Context, cfg *pgx.ConnConfig, prog model.Program, acfg audit.Config) (audit.Report, error) {
	connectCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(connectCtx, cfg)
	if err != nil {
		return audit.Report{}, fmt.Errorf("-db: connect: %w", err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return audit.Report{}, fmt.Errorf("begin a read-only transaction: %w", err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // read-only: nothing to keep
	return audit.Run(ctx, tx, prog, acfg)
}

// fail prints err, with any password of the URL db masked, and returns
// ExitUsage: the audit could not run.
func fail(stderr io.Writer, db string, err error) int {
	fmt.Fprintln(stderr, "idemgen audit:", redact(err.Error(), db))
	return ExitUsage
}

// redact masks in msg the password of the connection string db, in URL or
// keyword/value form, as psql and pgx do.
func redact(msg, db string) string {
	var pws []string
	if u, err := url.Parse(db); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			pws = append(pws, pw, url.QueryEscape(pw), url.PathEscape(pw))
		}
	}
	if cfg, err := pgx.ParseConfig(db); err == nil && cfg.Password != "" {
		pws = append(pws, cfg.Password)
	}
	for _, f := range strings.Fields(db) {
		if v, ok := strings.CutPrefix(f, "password="); ok && v != "" {
			pws = append(pws, strings.Trim(v, "'"))
		}
	}
	for _, pw := range pws {
		msg = strings.ReplaceAll(msg, pw, "xxxxx")
	}
	return msg
}

// renderReport writes the report as people read it: a table of the
// consumers, the outbox's totals, the doubled work, and what needs looking
// at.
func renderReport(w io.Writer, r audit.Report) {
	fmt.Fprintf(w, "idemgen audit of schema %s at %s\n\n", r.Schema, stamp(r.Now))
	if len(r.Consumers) == 0 {
		fmt.Fprintln(w, "no consumers in the packages")
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "CONSUMER\tMODE\tTABLE\tROWS\tOLDEST\tRETAIN\tPAST RETAIN\tRUNNING\tPAST LEASE\tRELEASED\tATTEMPTS>1\tMAX ATTEMPTS\tOUTBOX PENDING\tOUTBOX DEAD")
		for _, c := range r.Consumers {
			lease, released := "-", "-"
			if c.Mode == model.ModeExternal {
				lease, released = fmt.Sprint(c.Expired), fmt.Sprint(c.Released)
			}
			outPending, outDead := "-", "-"
			if r.Outbox != nil {
				outPending, outDead = fmt.Sprint(c.Outbox.Pending), fmt.Sprint(c.Outbox.Dead)
			}
			oldest := "-"
			if c.Rows > 0 {
				oldest = age(c.OldestAge)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%d\t%s\t%s\t%d\t%d\t%s\t%s\n",
				c.Consumer, c.Mode, c.Table, c.Rows, oldest, age(c.Retain), c.PastRetention, c.Running, lease, released, c.Retried, c.MaxAttempts, outPending, outDead)
		}
		tw.Flush()
	}
	fmt.Fprintln(w)
	if o := r.Outbox; o != nil {
		oldest := ""
		if o.Pending > 0 {
			oldest = fmt.Sprintf(", the oldest for %s", age(o.OldestPendingAge))
		}
		fmt.Fprintf(w, "outbox %s: %d pending%s; %d dead\n", o.Table, o.Pending, oldest, o.Dead)
	} else {
		fmt.Fprintf(w, "outbox: no %s table in schema %s\n", audit.OutboxTable, r.Schema)
	}

	if d := r.Doubles; d != nil {
		fmt.Fprintln(w)
		window := "in all its rows"
		if d.TimeColumn != "" {
			window = fmt.Sprintf("in the rows with %s >= %s (-since %s)", d.TimeColumn, stamp(d.From), goDuration(d.Since))
		}
		fmt.Fprintf(w, "doubled work in %s by %s, %s: ", d.Table, strings.Join(d.Columns, ","), window)
		if d.Groups == 0 {
			fmt.Fprintln(w, "none")
		} else {
			fmt.Fprintf(w, "%d value(s) in %d rows: %d row(s) of work done again\n", d.Groups, d.Rows, d.Extra)
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, strings.ToUpper(strings.Join(d.Columns, "\t"))+"\tROWS")
			for _, g := range d.Top {
				var vals []string
				for _, v := range g.Values {
					if v == nil {
						vals = append(vals, "NULL")
					} else {
						vals = append(vals, *v)
					}
				}
				fmt.Fprintf(tw, "%s\t%d\n", strings.Join(vals, "\t"), g.Count)
			}
			tw.Flush()
			if int64(len(d.Top)) < d.Groups {
				fmt.Fprintf(w, "(the first %d of %d; -limit lists more)\n", len(d.Top), d.Groups)
			}
		}
	}

	if notes := findings(r); len(notes) > 0 {
		fmt.Fprintln(w, "\nto look at:")
		for _, n := range notes {
			fmt.Fprintln(w, "  "+n)
		}
	}
}

// findings words the conditions of r that need an operator's attention.
func findings(r audit.Report) []string {
	var notes []string
	for _, c := range r.Consumers {
		if c.PastRetention > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d row(s) older than its retention of %s (the oldest %s): is the janitor (or the wrapper's Purge) running?",
				c.Consumer, c.PastRetention, age(c.Retain), age(c.OldestAge)))
		}
		if c.Expired > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d running claim(s) past their lease of %s (the first expired at %s): the worker is gone or stuck; the sweeper or the next delivery takes them over",
				c.Consumer, c.Expired, age(c.Lease), stamp(c.OldestExpired)))
		}
		if c.Retried > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d row(s) took more than one attempt (at most %d)", c.Consumer, c.Retried, c.MaxAttempts))
		}
		if c.Outbox.Dead > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d outbox row(s) dead after too many publish attempts (see their last_error)", c.Consumer, c.Outbox.Dead))
		}
	}
	if r.Doubled() {
		notes = append(notes, fmt.Sprintf("%s: work done more than once (%d extra row(s)): exit status 1", r.Doubles.Table, r.Doubles.Extra))
	}
	return notes
}

// goDuration writes d as a Go duration without its zero tail: 24h, 90m, 1h30m.
func goDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// stamp writes t in UTC, to the second.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

// age writes d in its two largest units: 41d3h, 5h20m, 3m10s, 42s.
func age(d time.Duration) string {
	if d < 0 {
		return "-" + age(-d)
	}
	d = d.Truncate(time.Second)
	day := 24 * time.Hour
	two := func(a int64, ua string, b int64, ub string) string {
		if b == 0 {
			return fmt.Sprintf("%d%s", a, ua)
		}
		return fmt.Sprintf("%d%s%d%s", a, ua, b, ub)
	}
	switch {
	case d >= day:
		return two(int64(d/day), "d", int64(d%day/time.Hour), "h")
	case d >= time.Hour:
		return two(int64(d/time.Hour), "h", int64(d%time.Hour/time.Minute), "m")
	case d >= time.Minute:
		return two(int64(d/time.Minute), "m", int64(d%time.Minute/time.Second), "s")
	}
	return fmt.Sprintf("%ds", int64(d/time.Second))
}

// The report as -json prints it: durations in seconds, times in RFC 3339
// (null when there is none).
type (
	auditJSON struct {
		Schema    string         `json:"schema"`
		Now       time.Time      `json:"now"`
		Consumers []consumerJSON `json:"consumers"`
		Outbox    *outboxJSON    `json:"outbox"`
		Doubles   *doublesJSON   `json:"doubles,omitempty"`
		Doubled   bool           `json:"doubled"`
	}
	consumerJSON struct {
		Consumer      string      `json:"consumer"`
		Package       string      `json:"package"`
		Handler       string      `json:"handler"`
		Mode          model.Mode  `json:"mode"`
		Table         string      `json:"table"`
		Schema        string      `json:"schema"`
		RetainSeconds float64     `json:"retain_seconds"`
		LeaseSeconds  float64     `json:"lease_seconds,omitempty"`
		Rows          int64       `json:"rows"`
		Oldest        *time.Time  `json:"oldest"`
		OldestSeconds float64     `json:"oldest_age_seconds"`
		PastRetention int64       `json:"past_retention"`
		Running       int64       `json:"running"`
		PastLease     int64       `json:"past_lease"`
		OldestExpired *time.Time  `json:"oldest_expired_lease"`
		Released      int64       `json:"released"`
		Retried       int64       `json:"attempts_over_1"`
		MaxAttempts   int64       `json:"max_attempts"`
		Outbox        *countsJSON `json:"outbox"`
	}
	countsJSON struct {
		Pending       int64      `json:"pending"`
		OldestPending *time.Time `json:"oldest_pending"`
		OldestSeconds float64    `json:"oldest_pending_age_seconds"`
		Dead          int64      `json:"dead"`
	}
	outboxJSON struct {
		Table  string `json:"table"`
		Schema string `json:"schema"`
		countsJSON
	}
	doublesJSON struct {
		Table        string      `json:"table"`
		Schema       string      `json:"schema"`
		Columns      []string    `json:"columns"`
		TimeColumn   string      `json:"time_column,omitempty"`
		SinceSeconds float64     `json:"since_seconds,omitempty"`
		From         *time.Time  `json:"from"`
		Groups       int64       `json:"groups"`
		Rows         int64       `json:"rows"`
		Extra        int64       `json:"extra_rows"`
		Top          []groupJSON `json:"top"`
	}
	groupJSON struct {
		Values []*string `json:"values"`
		Rows   int64     `json:"rows"`
	}
)

func jsonTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func jsonCounts(c audit.OutboxCounts) countsJSON {
	return countsJSON{Pending: c.Pending, OldestPending: jsonTime(c.OldestPending), OldestSeconds: c.OldestPendingAge.Seconds(), Dead: c.Dead}
}

func jsonReport(r audit.Report) auditJSON {
	out := auditJSON{Schema: r.Schema, Now: r.Now.UTC(), Consumers: []consumerJSON{}, Doubled: r.Doubled()}
	for _, c := range r.Consumers {
		cj := consumerJSON{
			Consumer: c.Consumer, Package: c.Package, Handler: c.Func, Mode: c.Mode, Table: c.Table, Schema: c.Schema,
			RetainSeconds: c.Retain.Seconds(), LeaseSeconds: c.Lease.Seconds(),
			Rows: c.Rows, Oldest: jsonTime(c.Oldest), OldestSeconds: c.OldestAge.Seconds(), PastRetention: c.PastRetention,
			Running: c.Running, PastLease: c.Expired, OldestExpired: jsonTime(c.OldestExpired), Released: c.Released,
			Retried: c.Retried, MaxAttempts: c.MaxAttempts,
		}
		if r.Outbox != nil {
			oc := jsonCounts(c.Outbox)
			cj.Outbox = &oc
		}
		out.Consumers = append(out.Consumers, cj)
	}
	if o := r.Outbox; o != nil {
		out.Outbox = &outboxJSON{Table: o.Table, Schema: o.Schema, countsJSON: jsonCounts(o.OutboxCounts)}
	}
	if d := r.Doubles; d != nil {
		dj := &doublesJSON{Table: d.Table, Schema: d.Schema, Columns: d.Columns, TimeColumn: d.TimeColumn, SinceSeconds: d.Since.Seconds(),
			From: jsonTime(d.From), Groups: d.Groups, Rows: d.Rows, Extra: d.Extra, Top: []groupJSON{}}
		for _, g := range d.Top {
			dj.Top = append(dj.Top, groupJSON{Values: g.Values, Rows: g.Count})
		}
		out.Doubles = dj
	}
	return out
}
