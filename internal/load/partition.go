package load

import (
	"fmt"
	"go/types"
	"slices"

	"github.com/idemgen/idemgen/internal/directive"
	"github.com/idemgen/idemgen/internal/model"
)

// bucketChoices explains the buckets, for the message about an unknown one.
const bucketChoices = "want hour, day, week (ISO weeks, from Monday) or month: the width of one partition of the inbox, " +
	"the time bucket (in UTC) of the message's own time that time= names"

// partition reads partition= and time=: the inbox is partitioned by the
// bucket of the message's own time. It refuses a bucket it does not know,
// one option without the other, a time field that is not a time.Time, a
// retention shorter than a bucket and the modes whose table idemgen does not
// partition.
func (c *checker) partition(d directive.Directive, h *model.Handler, msg types.Type) {
	part, hasPart := d.Lookup("partition")
	at, hasTime := d.Lookup("time")
	switch {
	case !hasPart && !hasTime:
		return
	case !hasPart:
		c.errorf(at.Pos, "time= is for partition= only: it names the message field whose bucket places the message in a partition of the inbox; "+
			"add partition=day (or hour, week, month) or remove time=")
		return
	}
	if why := map[model.Mode]string{
		model.ModeExternal: "a mode=external table holds claims whose retention counts from when they were done, which can be long after the message's time, " +
			"so dropping a partition by the message's time could drop a claim that is still running or just done, and its redelivery would call the provider again",
		model.ModeEntity: "the marker is a row of your business table, which idemgen does not create: partition that table yourself, " +
			"with the partition key in its unique constraint",
		model.ModeNatural: "a mode=natural handler has no inbox to partition",
	}[h.Mode]; why != "" {
		c.errorf(part.Pos, "partition= is for mode=tx only: %s", why)
		return
	}
	bucket := part.Value
	if !slices.Contains(model.Buckets, bucket) {
		msg := fmt.Sprintf("unknown partition=%s; %s", bucket, bucketChoices)
		if s := directive.Suggest(bucket, model.Buckets); s != "" {
			msg = fmt.Sprintf("unknown partition=%s (did you mean partition=%s?); %s", bucket, s, bucketChoices)
		}
		c.errorf(part.ValuePos, "%s", msg)
		return
	}
	if !hasTime {
		c.errorf(part.Pos, "partition= needs time=: the message field that holds the message's own time, "+
			"a time.Time its sender sets once (such as time=SentAt), so that every copy of the message has the same bucket and lands in one partition")
		return
	}
	if longest := model.BucketLongest[bucket]; h.Retain > 0 && h.Retain < longest {
		pos, what := part.ValuePos, "the default retention ("+h.Retain.String()+")"
		if o, ok := d.Lookup("retain"); ok {
			pos, what = o.ValuePos, "retain="+o.Value
		}
		c.errorf(pos, "%s is shorter than a %s (%v): the janitor would drop a bucket's partition while messages of it still arrive; "+
			"make retain= at least %v, or partition by a narrower bucket", what, bucket, longest, longest)
		return
	}
	t, ok := c.timeField(at, msg)
	if !ok {
		return
	}
	h.Partition = &model.Partition{Bucket: bucket, Time: t}
}

// timeField resolves time=, the message's time field: a field path to a
// time.Time, through no pointer (the generated tests set the field on a
// copy of the message, which must not share it).
func (c *checker) timeField(o directive.Option, msg types.Type) (model.KeyPart, bool) {
	path, pos := o.Value, o.ValuePos
	part := model.KeyPart{Path: path, Kind: model.KeyTime, Column: model.BucketColumn}
	if path == "" {
		c.errorf(pos, "time= is empty; name the message field that holds its time, such as time=SentAt")
		return part, false
	}
	walked, ok := c.walkPath(pos, path, msg, timePath)
	if !ok {
		return part, false
	}
	part.Hops = walked.hops
	cur := walked.leaf
	if !isNamed(cur, "time", "Time") {
		c.errorf(pos, "time field %s has type %s; it must be a time.Time (not a pointer or a string: a message without its time has no bucket), "+
			"the time its sender gave it, the same in every copy", path, c.typeString(cur))
		return part, false
	}
	t, ok := c.modelType(cur, pos)
	part.Type = t
	return part, ok
}
