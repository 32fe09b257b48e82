//! A connection to the daemon: say hello (get the shared memory), register and unregister
//! flows, ask for the status. Used by the `LD_PRELOAD` library and by [`Steering`](crate::Steering).
//!
//! Every call is bounded by [`TIMEOUT`]: a daemon that hangs costs a reader at most that,
//! once, and then the reader passes its traffic through.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::shm::Region;
use crate::system::Status;
use crate::unix;
use crate::wire::{Reply, Request, MAX_LINE};

/// Longest a request to the daemon may take.
pub const TIMEOUT: Duration = Duration::from_millis(500);

/// A reader's connection to the daemon.
pub struct Client {
    sock: UnixStream,
    region: Option<Region>,
    buf: Vec<u8>,
}

impl Client {
    /// Connects without saying hello (for the status).
    pub fn connect(name: &str) -> io::Result<Client> {
        let sock = unix::connect(name)?;
        sock.set_read_timeout(Some(TIMEOUT))?;
        sock.set_write_timeout(Some(TIMEOUT))?;
        Ok(Client {
            sock,
            region: None,
            buf: Vec::with_capacity(256),
        })
    }

    /// Connects and says hello: the shared memory comes back.
    pub fn hello(name: &str, pid: u32, program: &str) -> io::Result<Client> {
        let mut c = Client::connect(name)?;
        let (reply, fd) = c.request(&Request::Hello {
            pid,
            program: program.to_string(),
        })?;
        match (reply, fd) {
            (Reply::Hello { .. }, Some(fd)) => c.region = Some(Region::map(fd)?),
            (other, _) => return Err(unexpected(other)),
        }
        Ok(c)
    }

    /// The shared memory (after [`hello`](Self::hello)).
    pub fn region(&self) -> Option<&Region> {
        self.region.as_ref()
    }

    /// Takes the shared memory out (a reader that must keep it mapped after the client goes).
    pub fn take_region(&mut self) -> Option<Region> {
        self.region.take()
    }

    /// The socket to the daemon (a forked child closes its copy).
    pub fn socket(&self) -> &UnixStream {
        &self.sock
    }

    /// Registers a TCP connection by its socket's inode; returns its slot.
    pub fn register(
        &mut self,
        inode: u64,
        local: SocketAddr,
        remote: SocketAddr,
    ) -> io::Result<u32> {
        match self
            .request(&Request::Register {
                inode,
                local,
                remote,
            })?
            .0
        {
            Reply::Registered { slot } => Ok(slot),
            other => Err(unexpected(other)),
        }
    }

    pub fn unregister(&mut self, inode: u64) -> io::Result<()> {
        match self.request(&Request::Unregister { inode })?.0 {
            Reply::Unregistered => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    pub fn status(&mut self) -> io::Result<Status> {
        match self.request(&Request::Status)?.0 {
            Reply::Status(s) => Ok(s),
            other => Err(unexpected(other)),
        }
    }

    fn request(&mut self, req: &Request) -> io::Result<(Reply, Option<OwnedFd>)> {
        let mut line = serde_json::to_vec(req).map_err(io::Error::other)?;
        line.push(b'\n');
        (&self.sock).write_all(&line)?;
        self.buf.clear();
        let mut fd = None;
        let mut chunk = [0u8; 4096];
        while !self.buf.contains(&b'\n') {
            let n = unix::recv_with_fd(&self.sock, &mut chunk, &mut fd)?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            if self.buf.len() + n > MAX_LINE {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "reply too long"));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
        let end = self.buf.iter().position(|&b| b == b'\n').unwrap_or(0);
        let reply = serde_json::from_slice(&self.buf[..end]).map_err(io::Error::other)?;
        Ok((reply, fd))
    }
}

fn unexpected(r: Reply) -> io::Error {
    match r {
        Reply::Error { message } => io::Error::other(message),
        other => io::Error::other(format!("unexpected reply from the BWSS daemon: {other:?}")),
    }
}
