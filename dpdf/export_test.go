package dpdf

// SetBatchStatements sets how many statements a Reader parses at a time,
// for tests of the boundaries between batches; it returns the undo.
func SetBatchStatements(n int) (undo func()) {
	old := batchStatements
	batchStatements = n
	return func() { batchStatements = old }
}
