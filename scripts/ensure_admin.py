"""Make (or refresh) the local admin login and print it.

The password is generated once and kept in .local/admin-password (ignored by
git), so every start prints a login that works.
"""

import os
import secrets
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402


def main() -> None:
    username = os.environ.get("RUNQUEUE_ADMIN_USER", "admin")
    secret = ROOT / ".local" / "admin-password"
    if not secret.exists():
        secret.parent.mkdir(exist_ok=True)
        secret.write_text(secrets.token_urlsafe(12))
        secret.chmod(0o600)
    password = secret.read_text().strip()
    user, _ = get_user_model().objects.get_or_create(username=username)
    user.is_staff = user.is_superuser = True
    user.set_password(password)
    user.save()
    print(f"Admin login: username {username!r}, password {password!r}")


if __name__ == "__main__":
    main()
