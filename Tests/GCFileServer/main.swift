// gc-file-server: placeholder until the server lands.
