// Package procstat reads what Linux's /proc says about the machine and its
// processes: the CPU time of this process and of others (the PostgreSQL
// backends serving a benchmark's connections), how busy the whole machine
// was over an interval, and what the machine is (CPU model, memory, load).
// Elsewhere than Linux the readings are zero or unknown.
package procstat

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Meter measures, over an interval, the CPU time of this process and how
// busy the whole machine was (this process, the database, whatever else runs
// on it), to tell a round-trip-bound measurement from a CPU-bound one.
type Meter struct {
	self       time.Duration
	busy, idle uint64 // clock ticks of all CPUs, from /proc/stat
}

// userHz is the unit of /proc/stat and /proc/PID/stat on Linux.
const userHz = 100

// Start starts a Meter.
func Start() Meter {
	m := Meter{self: SelfCPU()}
	m.busy, m.idle = machineTicks()
	return m
}

// Stop returns the process's CPU time since Start and the fraction of the
// machine's CPU time that was busy meanwhile (0 when unknown).
func (m Meter) Stop() (self time.Duration, busy float64) {
	b, i := machineTicks()
	return SelfCPU() - m.self, busyFraction(b-m.busy, i-m.idle)
}

func busyFraction(busy, idle uint64) float64 {
	if busy+idle == 0 {
		return 0
	}
	return float64(busy) / float64(busy+idle)
}

// SelfCPU is the user and system CPU time this process has used.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func machineTicks() (busy, idle uint64) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	return parseMachineTicks(string(data))
}

// parseMachineTicks reads the aggregate cpu line of /proc/stat: busy (user,
// nice, system, irq, softirq, steal) and idle (idle, iowait) ticks.
func parseMachineTicks(stat string) (busy, idle uint64) {
	line, _, _ := strings.Cut(stat, "\n")
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

// ProcessCPU is the user and system time process pid has used, false when it
// cannot be read (no such process, not Linux).
func ProcessCPU(pid int) (time.Duration, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	return parseProcessCPU(string(data))
}

// parseProcessCPU reads fields 14 and 15 (utime, stime) of /proc/PID/stat,
// counted after the parenthesised command, which may hold spaces and
// parentheses itself.
func parseProcessCPU(stat string) (time.Duration, bool) {
	i := strings.LastIndex(stat, ") ")
	if i < 0 {
		return 0, false
	}
	fields := strings.Fields(stat[i+2:])
	if len(fields) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * time.Second / userHz, true
}

// ProcessName is the command name of process pid (/proc/PID/comm).
func ProcessName(pid int) (string, bool) {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(comm)), true
}

// CPUModel is the model name of the first CPU and the architecture.
func CPUModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v) + " (" + runtime.GOARCH + ")"
		}
	}
	return runtime.GOARCH
}

// MemTotal is the machine's memory in GiB, "unknown" if it cannot be read.
func MemTotal() string {
	for line := range strings.SplitSeq(ReadTrim("/proc/meminfo"), "\n") {
		var kb int64
		if _, err := fmt.Sscanf(line, "MemTotal: %d kB", &kb); err == nil {
			return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
		}
	}
	return "unknown"
}

// LoadAverage is the 1, 5 and 15 minute load averages, "unknown" if they
// cannot be read.
func LoadAverage() string {
	f := strings.Fields(ReadTrim("/proc/loadavg"))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// ReadTrim is the content of a file without surrounding space, "" if it
// cannot be read.
func ReadTrim(path string) string {
	data, _ := os.ReadFile(path)
	return strings.TrimSpace(string(data))
}
