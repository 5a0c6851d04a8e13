package bench

import (
	"bytes"
	"math"
	"os"
	goruntime "runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"
)

// modulePrefix is the import path prefix of durafeed's packages;
// emulatorPackage is the embedded emulator's (its knobs included), below
// it.
const (
	modulePrefix    = "github.com/durafeed/durafeed/"
	emulatorPackage = "cosmosemu"
)

// otherOwner names heap allocated by a stack without a frame of
// durafeed's own code (the HTTP transport's connections and buffers, the
// Go runtime's).
const otherOwner = "(no durafeed frame)"

// mib is a mebibyte, the unit of the memory figures.
const mib = 1 << 20

// liveHeapMetric is the Go runtime's live heap: the bytes the last
// garbage collection marked reachable.
const liveHeapMetric = "/gc/heap/live:bytes"

// heapSplit is the bench process's heap at one moment: everything runs
// in one process (the embedded emulator, the replicas, their SDK clients
// and the bench), so the heap is split by owner through the heap
// profile's allocation stacks.
type heapSplit struct {
	// inuse is runtime.MemStats.HeapInuse (live objects, garbage not yet
	// swept, and the spans' free space); live the live heap as of the last
	// garbage collection.
	inuse, live uint64
	// emulator and rest split the heap profile's in-use bytes (as of the
	// last garbage collection, sampled every runtime.MemProfileRate bytes
	// and scaled): allocated by a stack through the emulator's code (its
	// documents, indexes and answers) or by anything else (the replicas,
	// the SDK clients, the bench and the runtime's own). byPackage splits
	// rest by the durafeed package nearest the allocation on its stack
	// (the caller of the SDK or encoding/json that allocated), otherOwner
	// for none.
	emulator, rest uint64
	byPackage      map[string]uint64
}

// heapOwners classifies call stacks by the durafeed package nearest the
// allocation; it remembers each program counter's package.
type heapOwners struct {
	mu   sync.Mutex
	pkg  map[uintptr]string // "" when no frame of the PC is durafeed's
	recs []goruntime.MemProfileRecord
}

var owners = &heapOwners{pkg: map[uintptr]string{}}

// split reads the heap profile and adds up its in-use bytes by owner.
func (h *heapOwners) split() (emulator, rest uint64, byPackage map[string]uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n, _ := goruntime.MemProfile(nil, false)
	for {
		if cap(h.recs) < n+64 {
			h.recs = make([]goruntime.MemProfileRecord, n+64+n/4)
		}
		m, ok := goruntime.MemProfile(h.recs[:cap(h.recs)], false)
		if ok {
			n = m
			break
		}
		n = m
	}
	rate := int64(goruntime.MemProfileRate)
	byPackage = map[string]uint64{}
	for _, r := range h.recs[:n] {
		b := scaledInUse(r.InUseObjects(), r.InUseBytes(), rate)
		if b <= 0 {
			continue
		}
		switch pkg := h.owner(r.Stack()); {
		case pkg == emulatorPackage || strings.HasPrefix(pkg, emulatorPackage+"/"):
			emulator += uint64(b)
		default:
			rest += uint64(b)
			byPackage[pkg] += uint64(b)
		}
	}
	return emulator, rest, byPackage
}

// owner returns the durafeed package (below modulePrefix) of the frame
// nearest the allocation in stack (leaf first), inlined frames included,
// or otherOwner.
func (h *heapOwners) owner(stack []uintptr) string {
	for _, pc := range stack {
		pkg, ok := h.pkg[pc]
		if !ok {
			frames := goruntime.CallersFrames([]uintptr{pc})
			for {
				f, more := frames.Next()
				if p := packageOf(f.Function); p != "" {
					pkg = p
					break
				}
				if !more {
					break
				}
			}
			h.pkg[pc] = pkg
		}
		if pkg != "" {
			return pkg
		}
	}
	return otherOwner
}

// packageOf returns the durafeed package of a function's full name
// ("github.com/durafeed/durafeed/engine.(*Engine).fetch" → "engine"), or
// "" for another module's.
func packageOf(function string) string {
	rest, ok := strings.CutPrefix(function, modulePrefix)
	if !ok {
		return ""
	}
	slash := strings.LastIndexByte(rest, '/')
	if dot := strings.IndexByte(rest[slash+1:], '.'); dot >= 0 {
		return rest[:slash+1+dot]
	}
	return rest
}

// scaledInUse undoes the heap profile's sampling for one record, as
// runtime/pprof does: an allocation of average size s is recorded with
// probability 1 − e^(−s/rate).
func scaledInUse(count, size, rate int64) int64 {
	if count <= 0 || size <= 0 {
		return 0
	}
	if rate <= 1 {
		return size
	}
	avg := float64(size) / float64(count)
	return int64(float64(size) / (1 - math.Exp(-avg/float64(rate))))
}

// readHeap reads the heap now, split by owner as of the last garbage
// collection.
func readHeap() heapSplit {
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	s := []metrics.Sample{{Name: liveHeapMetric}}
	metrics.Read(s)
	h := heapSplit{inuse: ms.HeapInuse}
	if s[0].Value.Kind() == metrics.KindUint64 {
		h.live = s[0].Value.Uint64()
	}
	h.emulator, h.rest, h.byPackage = owners.split()
	return h
}

// heapAfterGC collects garbage (twice, so that the heap profile, which
// lags a cycle behind, is up to date) and reads the heap.
func heapAfterGC() heapSplit {
	goruntime.GC()
	goruntime.GC()
	return readHeap()
}

// BacklogMemory is what the bench process's heap held while a backlog
// drained, sampled every BacklogConfig.MemoryInterval. The replicas run
// in the bench process beside the embedded emulator, so every figure
// but the split includes the emulator's documents, the replicas, their
// SDK clients and the bench itself; the split attributes the heap
// profile's in-use bytes to the emulator when the allocation's call
// stack runs through its code, and to the replicas (with the clients,
// the bench and the runtime's own) otherwise. All figures are MiB.
type BacklogMemory struct {
	// Samples is how many times the heap was read.
	Samples int `json:"samples"`
	// HeapInusePeakMB is the largest runtime.MemStats.HeapInuse seen:
	// everything in the process, garbage not yet collected included.
	HeapInusePeakMB float64 `json:"heap_inuse_peak_mb"`
	// LivePeakMB is the largest live heap seen (what a garbage collection
	// last marked reachable: /gc/heap/live:bytes).
	LivePeakMB float64 `json:"live_peak_mb"`
	// ReplicasStartMB and ReplicasPeakMB are the part of the live heap
	// not allocated through the emulator's code when the drain started
	// and at most during it: the replicas (engine, store, runtime, SDK
	// clients and their connections), the client, the bench and the
	// runtime's own.
	ReplicasStartMB float64 `json:"replicas_start_mb"`
	ReplicasPeakMB  float64 `json:"replicas_peak_mb"`
	// EmulatorStartMB and EmulatorPeakMB are the emulator's part (every
	// container's documents and indexes, answers in flight) at the start
	// and at most.
	EmulatorStartMB float64 `json:"emulator_start_mb"`
	EmulatorPeakMB  float64 `json:"emulator_peak_mb"`
	// ReplicasByPackage splits the replicas' part, at the sample where
	// it peaked, by the durafeed package nearest each allocation on its
	// stack (whichever library allocated for it: the SDK, encoding/json),
	// "(no durafeed frame)" for allocations without one (the HTTP
	// transport's connections and buffers, the Go runtime's); packages
	// under 1 MB are left out.
	ReplicasByPackage map[string]float64 `json:"replicas_by_package_mb,omitempty"`
}

// BacklogHost is how busy the machine was during a drain: on a shared
// machine other processes' load slows a drain, and a drain of a second
// or two can meet a burst of it. Read from /proc on Linux (zero
// elsewhere).
type BacklogHost struct {
	// ProcessCPUS is the CPU time (user and system) the bench process
	// used over the drain, and ProcessCores that over the drain's length.
	ProcessCPUS  float64 `json:"process_cpu_s"`
	ProcessCores float64 `json:"process_cores"`
	// LoadMean and LoadMax are the machine's one-minute load average
	// (runnable threads of every process, this one's included), read
	// with the heap: the mean and the largest reading.
	LoadMean float64 `json:"load_mean"`
	LoadMax  float64 `json:"load_max"`
	// CPUs is the number of CPUs the machine has.
	CPUs int `json:"cpus"`
}

// clockTicks is the unit of /proc/self/stat's CPU times (USER_HZ, 100
// on every Linux platform Go supports).
const clockTicks = 100

// processCPU returns the CPU time the process has used (user and
// system), or 0 where /proc/self/stat cannot be read.
func processCPU() time.Duration {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	// The fields after the command name, which may hold spaces:
	// state, ppid, ..., utime and stime are the 12th and 13th.
	_, rest, ok := bytes.Cut(b, []byte(") "))
	f := strings.Fields(string(rest))
	if !ok || len(f) < 13 {
		return 0
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(u+s) * time.Second / clockTicks
}

// loadAverage returns the one-minute load average, or -1 where
// /proc/loadavg cannot be read.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// heapSampler reads the heap (and the machine's load) every interval
// until stopped.
type heapSampler struct {
	stopCh chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	mem    BacklogMemory
	// began and cpu0 are when sampling started and the process's CPU
	// time then; loads are the load averages read.
	began time.Time
	cpu0  time.Duration
	loads []float64
}

// startHeapSampler reads the heap at once and then every interval.
func startHeapSampler(interval time.Duration) *heapSampler {
	h := &heapSampler{stopCh: make(chan struct{}), done: make(chan struct{}), began: time.Now(), cpu0: processCPU()}
	first := readHeap()
	h.mem.ReplicasStartMB, h.mem.EmulatorStartMB = mb(first.rest), mb(first.emulator)
	h.add(first)
	go func() {
		defer close(h.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-h.stopCh:
				return
			case <-t.C:
				h.add(readHeap())
			}
		}
	}()
	return h
}

func (h *heapSampler) add(s heapSplit) {
	load := loadAverage()
	h.mu.Lock()
	defer h.mu.Unlock()
	if load >= 0 {
		h.loads = append(h.loads, load)
	}
	m := &h.mem
	m.Samples++
	m.HeapInusePeakMB = max(m.HeapInusePeakMB, mb(s.inuse))
	m.LivePeakMB = max(m.LivePeakMB, mb(s.live))
	if r := mb(s.rest); r > m.ReplicasPeakMB || m.ReplicasByPackage == nil {
		m.ReplicasPeakMB = r
		m.ReplicasByPackage = map[string]float64{}
		for pkg, b := range s.byPackage {
			if b >= mib {
				m.ReplicasByPackage[pkg] = mb(b)
			}
		}
	}
	m.EmulatorPeakMB = max(m.EmulatorPeakMB, mb(s.emulator))
}

// current returns the figures so far (no package split is nil, as its
// JSON reads back).
func (h *heapSampler) current() BacklogMemory {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.mem
	if len(m.ReplicasByPackage) == 0 {
		m.ReplicasByPackage = nil
	}
	return m
}

// stop takes a last sample and returns the figures: the heap's and the
// machine's since the start.
func (h *heapSampler) stop() (BacklogMemory, BacklogHost) {
	close(h.stopCh)
	<-h.done
	h.add(readHeap())
	cpu, span := processCPU()-h.cpu0, time.Since(h.began)
	host := BacklogHost{ProcessCPUS: round2(cpu.Seconds()), CPUs: goruntime.NumCPU()}
	if span > 0 {
		host.ProcessCores = round2(cpu.Seconds() / span.Seconds())
	}
	h.mu.Lock()
	if len(h.loads) > 0 {
		var sum float64
		for _, l := range h.loads {
			sum += l
			host.LoadMax = max(host.LoadMax, l)
		}
		host.LoadMean = round2(sum / float64(len(h.loads)))
	}
	h.mu.Unlock()
	return h.current(), host
}

// mb is bytes in MiB, rounded to 0.1.
func mb(b uint64) float64 { return math.Round(float64(b)/mib*10) / 10 }
