package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuMeter measures, over a cell, the CPU time of this process (the Go
// clients) and how busy the whole machine was (clients, PostgreSQL, and
// whatever else runs on it), to tell a round-trip-bound cell from a CPU-bound
// one.
type cpuMeter struct {
	self       time.Duration
	busy, idle uint64 // clock ticks of all CPUs, from /proc/stat
}

// userHz is the unit of /proc/stat on Linux.
const userHz = 100

func startCPU() cpuMeter {
	m := cpuMeter{self: selfCPU()}
	m.busy, m.idle = machineTicks()
	return m
}

// stop returns the process's CPU time since start and the fraction of the
// machine's CPUs that were busy.
func (m cpuMeter) stop() (self time.Duration, busy float64) {
	b, i := machineTicks()
	db, di := b-m.busy, i-m.idle
	if db+di > 0 {
		busy = float64(db) / float64(db+di)
	}
	return selfCPU() - m.self, busy
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// machineTicks reads the aggregate cpu line of /proc/stat: busy (user, nice,
// system, irq, softirq, steal) and idle (idle, iowait) ticks. Elsewhere than
// Linux both are zero.
func machineTicks() (busy, idle uint64) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, 0
	}
	for i, f := range fields[1:9] {
		v, _ := strconv.ParseUint(f, 10, 64)
		if i == 3 || i == 4 {
			idle += v
		} else {
			busy += v
		}
	}
	return busy, idle
}
