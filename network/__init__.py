"""The network layer shared by brokers and the controller: socket servers, the connection each request
arrives on (`request_context.py`), and the frame loop a client connection shares with the server's."""
