package capture

import "os"

// readMeta is ReadMeta of the capture file at path.
func readMeta(path string) (Meta, error) {
	f, err := os.Open(path)
	if err != nil {
		return Meta{}, err
	}
	defer f.Close()
	return ReadMeta(f)
}

// readPage is ReadPage of the capture file at path.
func readPage(path string, offset int64, maxBytes int) (Page, Meta, error) {
	f, err := os.Open(path)
	if err != nil {
		return Page{}, Meta{}, err
	}
	defer f.Close()
	return ReadPage(f, offset, maxBytes)
}
