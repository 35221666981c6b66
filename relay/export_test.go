package relay

// Loops names the relay's loops as OnLoopExit reports them.
var Loops = []string{"stats", "observer", "heartbeat", "cleanup", "saver", "slot watch", "publisher watch", "stop watch"}

// OnLoopExit calls f as each of the relay's loops returns, with the loop's
// name, until restore is called.
func OnLoopExit(f func(loop string)) (restore func()) {
	loopExitHook.Store(&f)
	return func() { loopExitHook.Store(nil) }
}
