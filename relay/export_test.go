package relay

// Loops names the relay's loops as OnLoopExit reports them.
var Loops = []string{"stats", "observer", "heartbeat", "cleanup", "saver", "slot watch", "publisher watch", "stop watch"}

// OnLoopExit makes r call f as each of its loops returns, with the loop's
// name. Call it before r.Run.
func OnLoopExit(r *Relay, f func(loop string)) { r.loopExitHook = f }
