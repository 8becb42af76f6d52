package jobs

// ResolveID turns a job ID or a unique prefix of one (at least
// jobstore.MinIDPrefix characters) into the job's ID. It is for the
// machine's owner, the local CLI: the tools take canonical IDs only.
func (s *Service) ResolveID(ref string) (string, error) { return s.store.Resolve(ref) }
