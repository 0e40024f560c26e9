package procstat

import (
	"os"
	"runtime"
	"testing"
	"time"
)

func TestParseMachineTicks(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	stat := "cpu  100 5 50 800 20 3 2 1 0 0\ncpu0 50 2 25 400 10 1 1 0 0 0\n"
	busy, idle := parseMachineTicks(stat)
	if busy != 100+5+50+3+2+1 || idle != 800+20 {
		t.Fatalf("busy %d, idle %d; want 161 and 820", busy, idle)
	}
	if f := busyFraction(busy, idle); f < 0.164 || f > 0.165 {
		t.Fatalf("busy fraction %v, want 161/981", f)
	}
	for _, bad := range []string{"", "intr 1 2 3", "cpu 1 2 3"} {
		if b, i := parseMachineTicks(bad); b != 0 || i != 0 {
			t.Errorf("%q: %d, %d; want 0, 0", bad, b, i)
		}
	}
	if f := busyFraction(0, 0); f != 0 {
		t.Errorf("busy fraction of no ticks %v, want 0", f)
	}
}

func TestParseProcessCPU(t *testing.T) {
	// A command with a space and a parenthesis: the fields count after the
	// last ") ". utime 250 and stime 150 ticks are fields 14 and 15.
	stat := "4242 (postgres: a) b) S 1 4242 4242 0 -1 4194560 1 0 0 0 250 150 0 0 20 0 1 0 100 1000 10"
	d, ok := parseProcessCPU(stat)
	if !ok || d != 4*time.Second {
		t.Fatalf("CPU %v, %v; want 4s", d, ok)
	}
	for _, bad := range []string{"", "12 (x)", "12 (x) S 1 2", "12 (x) S 1 2 3 4 5 6 7 8 9 10 x y"} {
		if _, ok := parseProcessCPU(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestMeterOnThisMachine spins for a while and checks what the meter saw:
// some CPU time of this process and a busy fraction between 0 and 1 (on
// Linux, more than none: this process was busy).
func TestMeterOnThisMachine(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's")
	}
	m := Start()
	deadline := time.Now().Add(200 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	self, busy := m.Stop()
	if self <= 0 || busy <= 0 || busy > 1 {
		t.Fatalf("after spinning 200 ms: self CPU %v, machine busy %v (%d turns)", self, busy, x)
	}
	if d, ok := ProcessCPU(os.Getpid()); !ok || d <= 0 {
		t.Fatalf("this process's CPU from /proc: %v, %v", d, ok)
	}
	if name, ok := ProcessName(os.Getpid()); !ok || name == "" {
		t.Fatalf("this process's name: %q, %v", name, ok)
	}
	if _, ok := ProcessCPU(-1); ok {
		t.Fatal("process -1 has a CPU time")
	}
	if LoadAverage() == "unknown" || MemTotal() == "unknown" || CPUModel() == "" {
		t.Fatalf("machine: load %q, memory %q, CPU %q", LoadAverage(), MemTotal(), CPUModel())
	}
}
