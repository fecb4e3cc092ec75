"""The front door: the ports clients reach, in front of a tritonserver on 127.0.0.1.
Importing this package imports none of its modules.

`gate` (admission by work, fair order, the stated wait), `wire` (a request's work, read
off the wire), `door` (`Door`: admission, sending on, holding for repairs, the drain),
`http_front` and `grpc_front` (the two protocols, passed on to tritonserver; `http_server`:
the HTTP port's own HTTP/1.1 server, `http_messages` what it hands its handler, `inflate`
its compressed bodies; `upstream`: the HTTP door's connections to tritonserver), `front`
(`FrontDoor`: the door with its ports open, in a loop of its own), `workers` (`DoorWorkers`:
N doors in processes of their own on the same ports) and `steering` (which of them a client
network's connections meet).
"""
