package tools

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/owndirs"
	"github.com/commandcore/commandcore/internal/toolpath"
)

// waitDescription is process.wait's tool description.
var waitDescription = fmt.Sprintf("Wait for jobs to end: returns when any (mode all: every) job is terminal, or after timeout_ms, with the terminal jobs' records as ended, the live ones' ids as pending, and met saying why it returned. For one job, until ends the wait sooner: output (literal text, e.g. \"ready\"; met gives its stream, offset and line), port (a TCP port the job listens on) or path (exists); output is seen as soon as it is written, port and path are looked for %d times a second. With a progress token, a progress notification arrives at least every %s while it waits. Cancelled with the request.",
	time.Second/limits.UntilProbeInterval, seconds(limits.WaitProgressMaxGap))

// pathExists is until.path's probe: the path resolved as the file tools
// resolve it, so a wait cannot tell what lies in the agent's own
// directories or a process's /proc files either.
func pathExists(own *owndirs.Set) jobs.PathProbe {
	return func(path string) (bool, error) {
		dir, name, err := toolpath.Parent(own, path, false)
		if errcode.Is(err, errcode.PermissionDenied) {
			return false, err
		}
		if err != nil {
			// A directory on the way does not exist (yet).
			return false, nil
		}
		defer dir.Close()
		if name == "." {
			return true, nil
		}
		var st unix.Stat_t
		return unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil, nil
	}
}

// untilPathAllowed refuses until.path where the owner's ceiling in
// configDir refuses files.list: a wait tells no more than files.list
// would. (A relay refuses it to a token without files.list; the grant of
// a call names its one tool only.)
func untilPathAllowed(configDir string, in jobs.WaitRequest) error {
	if in.Until == nil || in.Until.Path == "" || configDir == "" {
		return nil
	}
	c, err := authz.LoadCeiling(configDir)
	if err != nil {
		return err
	}
	if c.Check(filesListTool) != nil {
		return errcode.New(errcode.PermissionDenied, "until.path needs %s, which the machine's owner does not allow here", filesListTool)
	}
	return nil
}

// wait runs process.wait, keeping a client that gave a progress token
// informed while it waits, so the client's request timeout does not fire.
func wait(ctx context.Context, svc *jobs.Service, host *Host, c Call, in jobs.WaitRequest) (*jobs.WaitResult, error) {
	if err := untilPathAllowed(host.ConfigDir, in); err != nil {
		return nil, err
	}
	exists := pathExists(host.Own)
	tok := c.Req.Params.GetProgressToken()
	if tok == nil || c.Req.Session == nil {
		return svc.Wait(ctx, c.Who, in, exists)
	}
	// The notifications run beside the wait: a slow client delays its own
	// notifications, never the wait's end.
	nctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		waitProgress(nctx, c.Req.Session, tok)
	}()
	res, err := svc.Wait(ctx, c.Who, in, exists)
	stop()
	// No notification may follow the result.
	wg.Wait()
	return res, err
}

// waitProgress sends a notification every limits.WaitProgressPeriod until
// ctx ends; its progress is the seconds waited so far.
func waitProgress(ctx context.Context, ss *mcp.ServerSession, tok any) {
	began := time.Now()
	t := time.NewTicker(limits.WaitProgressPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
			ProgressToken: tok,
			Progress:      time.Since(began).Seconds(),
			Message:       "waiting for the jobs to end",
		})
		if err != nil {
			return
		}
	}
}
