"""Load for the bookmarks API: users that create bookmarks and read them back."""

import uuid

from locust import FastHttpUser, between, task


class BookmarkUser(FastHttpUser):
    wait_time = between(0.05, 0.2)

    def on_start(self):
        self.last_id = None  # the bookmark this user created last

    @task(1)
    def create(self):
        new = {"url": f"https://example.org/{uuid.uuid4().hex}", "title": "load"}
        with self.client.post("/bookmarks", json=new, catch_response=True) as response:
            if response.status_code != 201:
                response.failure(f"create answered {response.status_code}")
            else:
                self.last_id = response.json()["id"]

    @task(3)
    def read(self):
        bookmark_id = self.last_id
        if bookmark_id is None:
            return
        with self.client.get(f"/bookmarks/{bookmark_id}", name="/bookmarks/{id}", catch_response=True) as response:
            if response.status_code != 200 or response.json()["id"] != bookmark_id:
                response.failure(f"get answered {response.status_code}")

    @task(1)
    def list(self):
        with self.client.get("/bookmarks?limit=10", name="/bookmarks", catch_response=True) as response:
            if response.status_code != 200 or len(response.json()) > 10:
                response.failure(f"list answered {response.status_code}")
