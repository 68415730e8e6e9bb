;; The README's eglot snippet in a real Emacs (batch): open train.py of the current folder, wait
;; for zerograd's diagnostics through flymake and print them as LINE: TEXT (tests/test_editors.py).
(require 'package)
(package-initialize)
(require 'eglot)
;; --- the README's snippet ---
(with-eval-after-load 'eglot
  (add-to-list 'eglot-server-programs '((python-mode python-ts-mode) "zerograd" "server")))
;; ----------------------------
(find-file (expand-file-name "train.py" default-directory))
(python-mode)
(apply #'eglot (eglot--guess-contact))
(let ((deadline (+ (float-time) 60)))
  (while (and (< (float-time) deadline) (null (flymake-diagnostics)))
    (accept-process-output nil 0.2)))
(dolist (d (flymake-diagnostics))
  (princ (format "%d: %s\n" (line-number-at-pos (flymake-diagnostic-beg d)) (flymake-diagnostic-text d))))
(kill-emacs (if (flymake-diagnostics) 0 1))
