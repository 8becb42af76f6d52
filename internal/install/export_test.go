package install

// SetLingerDir points Lingering at dir for a test and returns the undo.
func SetLingerDir(dir string) func() {
	old := lingerDir
	lingerDir = dir
	return func() { lingerDir = old }
}

// ParseExecStart reads back a unit's ExecStart= words.
var ParseExecStart = parseExecStart
