package main

// liveErr is nil on Linux: the live commands run (see live).
var liveErr error
