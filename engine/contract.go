package engine

import (
	pb "github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
)

// The probe contract (records, probe states and query's answers, insert
// modes, Prober) is package probe's. These names stay while callers move
// to it.
type (
	Record       = pb.Record
	Sink         = pb.Sink
	BatchSink    = pb.BatchSink
	SinkFunc     = pb.SinkFunc
	ProbeState   = pb.State
	ProbeInfo    = pb.Info
	ModuleVars   = pb.ModuleVars
	Final        = pb.Final
	Prober       = pb.Prober
	InsertMode   = pb.InsertMode
	PackInserter = pb.PackInserter
	SymbolAdder  = pb.SymbolAdder
	BuildError   = pb.BuildError
)

const (
	StateActive   = pb.StateActive
	StatePending  = pb.StatePending
	StateDisabled = pb.StateDisabled
	StateMismatch = pb.StateMismatch
	StateRefused  = pb.StateRefused
	StateGone     = pb.StateGone
	StateRemoved  = pb.StateRemoved

	InsertNew     = pb.InsertNew
	InsertMerge   = pb.InsertMerge
	InsertReplace = pb.InsertReplace

	ReasonEnded = pb.ReasonEnded
)

var (
	ErrModuleIn = pb.ErrModuleIn
	ErrNoMinor  = pb.ErrNoMinor
)

// SelectBuild is probe.SelectBuild.
func SelectBuild(builds []*rpn.Module, have []byte, where string) (*rpn.Module, error) {
	return pb.SelectBuild(builds, have, where)
}

// InsertPack is probe.InsertPack.
func InsertPack(p Prober, builds []*rpn.Module, mode InsertMode) ([]ProbeInfo, error) {
	return pb.InsertPack(p, builds, mode)
}

// ProbeKindName is probe.KindName.
func ProbeKindName(d *rpn.Probe) string { return pb.KindName(d) }

// ReasonSwitchedOff is probe.ReasonSwitchedOff.
func ReasonSwitchedOff(minor uint16) string { return pb.ReasonSwitchedOff(minor) }

// SwitchMinors is probe.SwitchMinors.
func SwitchMinors(name string, have, minors []uint16, set func(uint16)) (int, error) {
	return pb.SwitchMinors(name, have, minors, set)
}
