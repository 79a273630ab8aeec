"""The network layer shared by brokers, the controller and the clients: socket servers, the connection each
request arrives on (`request_context.py`), the frame loop a client connection shares with the server's,
the client side of a connection (`connection.py`) and the `Transport` nodes reach each other through
(`tcp_transport.py`)."""
