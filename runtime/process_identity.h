// Which process table a pid belongs to, and whether a pid there is still running: the
// basis for cleaning up after a process that was SIGKILLed (its temporary files, its
// private rendezvous directory, its rendezvous slots).
//
// A pid means one process only within one host, one boot and one pid namespace; the
// "process table id" names those three, so a record "<table id> <pid>" written by one
// process can be checked by another: only from the same table id can the pid be judged.
//
//   std::string me = process_table_id();            // "host|boot-id|pid:[4026531836]"
//   if (owner_table == me && !pid_alive(owner_pid)) remove(...);
#pragma once

#include <sys/types.h>

#include <string>

namespace dit {

// Host name, kernel boot id and pid namespace of this process, joined by '|' (spaces
// replaced by '_'). Computed once.
const std::string& process_table_id();
// The host name alone (gethostname; "?" when it fails): what the weight caches' entries record,
// so that in a directory several machines share each removes only entries of its own.
const std::string& host_name();
// An 8-hex-digit hash of process_table_id(), short enough for file names.
const std::string& process_table_tag();
// False when no process `pid` exists in this pid namespace, or it is a zombie (ended, not
// yet reaped). True otherwise, including when it belongs to another user.
bool pid_alive(pid_t pid);

}  // namespace dit
