// Package xen is the native Xen backend: the engine's target for a guest
// kernel seen from dom0 (target xen:DOMID). See docs/xen.md.
package xen
