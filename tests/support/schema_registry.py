"""A stand-in for a schema registry, started by the tests that need one: Confluent's Schema Registry REST API
(docs.confluent.io, "Schema Registry API reference") as far as a Kafka Connect AvroConverter and a consumer
use it: ``POST /subjects/{subject}/versions`` registers a schema (the same schema gets the same id) and
``GET /schemas/ids/{id}`` answers it. No registry server can be installed here (Confluent's and Karapace's
are not on PyPI, npm or Debian), so this speaks the documented protocol on a real socket, on 127.0.0.1.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class SchemaRegistryServer:
    def __init__(self):
        self.schemas: dict[int, str] = {}
        self.lookups: list[int] = []  # every GET /schemas/ids/{id}, in order
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                parts = self.path.strip("/").split("/")
                if len(parts) == 3 and parts[:2] == ["schemas", "ids"] and parts[2].isdigit():
                    registry.lookups.append(int(parts[2]))
                    schema = registry.schemas.get(int(parts[2]))
                    if schema is not None:
                        return self._answer(200, {"schema": schema})
                self._answer(404, {"error_code": 40403, "message": "Schema not found"})

            def do_POST(self):
                parts = self.path.strip("/").split("/")
                if len(parts) == 3 and parts[0] == "subjects" and parts[2] == "versions":
                    schema = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["schema"]
                    known = [i for i, s in registry.schemas.items() if s == schema]
                    schema_id = known[0] if known else len(registry.schemas) + 1
                    registry.schemas[schema_id] = schema
                    return self._answer(200, {"id": schema_id})
                self._answer(404, {"error_code": 404, "message": "Not found"})

            def _answer(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> SchemaRegistryServer:
        self._thread.start()
        return self

    def register(self, subject: str, schema: dict) -> int:
        import httpx

        answer = httpx.post(f"{self.url}/subjects/{subject}/versions", json={"schema": json.dumps(schema)})
        answer.raise_for_status()
        return answer.json()["id"]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
