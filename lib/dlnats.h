/* SPDX-License-Identifier: MIT */
/*
 * dlnats: libnats and OpenSSL's libcrypto (SHA-256 for the object store's
 * digests; OpenSSL set up without its exit handler, natsconn.h), loaded by
 * dlnats_open() when fleet: is configured (lib/dlopen.h). Include this
 * instead of <nats/nats.h> and <openssl/evp.h>: each function named below
 * is then a call through its pointer, NULL until dlnats_open() succeeded.
 * A function newly called must join both lists (the build says so).
 */
#ifndef VMT_DLNATS_H
#define VMT_DLNATS_H

#include <stddef.h>

#include <nats/nats.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#define VMT_DLNATS_SONAME "libnats.so.3.4"
#define VMT_DLCRYPTO_SONAME "libcrypto.so.3"

#define VMT_DLNATS_SYMS(X) \
	X(jsCtx_Destroy) \
	X(jsOptions_Init) \
	X(jsStreamConfig_Init) \
	X(jsStreamInfo_Destroy) \
	X(jsSubOptions_Init) \
	X(js_AddStream) \
	X(js_GetLastMsg) \
	X(js_GetStreamInfo) \
	X(js_Publish) \
	X(js_PublishMsg) \
	X(js_PurgeStream) \
	X(js_SubscribeSync) \
	X(natsConnection_Connect) \
	X(natsConnection_Destroy) \
	X(natsConnection_Flush) \
	X(natsConnection_FlushTimeout) \
	X(natsConnection_GetConnectedUrl) \
	X(natsConnection_GetLastError) \
	X(natsConnection_JetStream) \
	X(natsConnection_PublishRequestString) \
	X(natsConnection_PublishString) \
	X(natsConnection_Status) \
	X(natsConnection_Subscribe) \
	X(natsConnection_SubscribeSync) \
	X(natsInbox_Create) \
	X(natsInbox_Destroy) \
	X(natsMsgHeader_Set) \
	X(natsMsg_Create) \
	X(natsMsg_Destroy) \
	X(natsMsg_GetData) \
	X(natsMsg_GetDataLength) \
	X(natsMsg_GetReply) \
	X(natsMsg_GetSubject) \
	X(natsOptions_Create) \
	X(natsOptions_Destroy) \
	X(natsOptions_LoadCATrustedCertificates) \
	X(natsOptions_LoadCertificatesChain) \
	X(natsOptions_SetDisconnectedCB) \
	X(natsOptions_SetMaxReconnect) \
	X(natsOptions_SetNKeyFromSeed) \
	X(natsOptions_SetName) \
	X(natsOptions_SetReconnectWait) \
	X(natsOptions_SetReconnectedCB) \
	X(natsOptions_SetSecure) \
	X(natsOptions_SetServers) \
	X(natsOptions_SetTimeout) \
	X(natsOptions_SetUserCredentialsFromFiles) \
	X(natsOptions_SetUserInfo) \
	X(natsStatus_GetText) \
	X(natsSubscription_Destroy) \
	X(natsSubscription_NextMsg) \
	X(natsSubscription_SetPendingLimits) \
	X(natsSubscription_Unsubscribe) \
	X(nats_CloseAndWait) \
	X(nats_GetLastError) \
	X(nats_Now)

#define VMT_DLCRYPTO_SYMS(X) \
	X(EVP_DigestFinal_ex) \
	X(EVP_DigestInit_ex) \
	X(EVP_DigestUpdate) \
	X(EVP_MD_CTX_free) \
	X(EVP_MD_CTX_new) \
	X(EVP_sha256) \
	X(OPENSSL_init_crypto)

#define VMT_DLNATS_DECLARE(f) extern __typeof__(f) *sym_##f;
VMT_DLNATS_SYMS(VMT_DLNATS_DECLARE)
VMT_DLCRYPTO_SYMS(VMT_DLNATS_DECLARE)
#undef VMT_DLNATS_DECLARE

/*
 * Both libraries, once, on the main thread before any fleet thread: 0, or
 * -ELIBACC with why ("libnats.so.3.4 cannot be loaded: ..."), and nothing
 * of either may be called.
 */
int dlnats_open(char *why, size_t why_len);

#ifndef VMT_DLNATS_IMPL
#define jsCtx_Destroy sym_jsCtx_Destroy
#define jsOptions_Init sym_jsOptions_Init
#define jsStreamConfig_Init sym_jsStreamConfig_Init
#define jsStreamInfo_Destroy sym_jsStreamInfo_Destroy
#define jsSubOptions_Init sym_jsSubOptions_Init
#define js_AddStream sym_js_AddStream
#define js_GetLastMsg sym_js_GetLastMsg
#define js_GetStreamInfo sym_js_GetStreamInfo
#define js_Publish sym_js_Publish
#define js_PublishMsg sym_js_PublishMsg
#define js_PurgeStream sym_js_PurgeStream
#define js_SubscribeSync sym_js_SubscribeSync
#define natsConnection_Connect sym_natsConnection_Connect
#define natsConnection_Destroy sym_natsConnection_Destroy
#define natsConnection_Flush sym_natsConnection_Flush
#define natsConnection_FlushTimeout sym_natsConnection_FlushTimeout
#define natsConnection_GetConnectedUrl sym_natsConnection_GetConnectedUrl
#define natsConnection_GetLastError sym_natsConnection_GetLastError
#define natsConnection_JetStream sym_natsConnection_JetStream
#define natsConnection_PublishRequestString sym_natsConnection_PublishRequestString
#define natsConnection_PublishString sym_natsConnection_PublishString
#define natsConnection_Status sym_natsConnection_Status
#define natsConnection_Subscribe sym_natsConnection_Subscribe
#define natsConnection_SubscribeSync sym_natsConnection_SubscribeSync
#define natsInbox_Create sym_natsInbox_Create
#define natsInbox_Destroy sym_natsInbox_Destroy
#define natsMsgHeader_Set sym_natsMsgHeader_Set
#define natsMsg_Create sym_natsMsg_Create
#define natsMsg_Destroy sym_natsMsg_Destroy
#define natsMsg_GetData sym_natsMsg_GetData
#define natsMsg_GetDataLength sym_natsMsg_GetDataLength
#define natsMsg_GetReply sym_natsMsg_GetReply
#define natsMsg_GetSubject sym_natsMsg_GetSubject
#define natsOptions_Create sym_natsOptions_Create
#define natsOptions_Destroy sym_natsOptions_Destroy
#define natsOptions_LoadCATrustedCertificates sym_natsOptions_LoadCATrustedCertificates
#define natsOptions_LoadCertificatesChain sym_natsOptions_LoadCertificatesChain
#define natsOptions_SetDisconnectedCB sym_natsOptions_SetDisconnectedCB
#define natsOptions_SetMaxReconnect sym_natsOptions_SetMaxReconnect
#define natsOptions_SetNKeyFromSeed sym_natsOptions_SetNKeyFromSeed
#define natsOptions_SetName sym_natsOptions_SetName
#define natsOptions_SetReconnectWait sym_natsOptions_SetReconnectWait
#define natsOptions_SetReconnectedCB sym_natsOptions_SetReconnectedCB
#define natsOptions_SetSecure sym_natsOptions_SetSecure
#define natsOptions_SetServers sym_natsOptions_SetServers
#define natsOptions_SetTimeout sym_natsOptions_SetTimeout
#define natsOptions_SetUserCredentialsFromFiles sym_natsOptions_SetUserCredentialsFromFiles
#define natsOptions_SetUserInfo sym_natsOptions_SetUserInfo
#define natsStatus_GetText sym_natsStatus_GetText
#define natsSubscription_Destroy sym_natsSubscription_Destroy
#define natsSubscription_NextMsg sym_natsSubscription_NextMsg
#define natsSubscription_SetPendingLimits sym_natsSubscription_SetPendingLimits
#define natsSubscription_Unsubscribe sym_natsSubscription_Unsubscribe
#define nats_CloseAndWait sym_nats_CloseAndWait
#define nats_GetLastError sym_nats_GetLastError
#define nats_Now sym_nats_Now
#define EVP_DigestFinal_ex sym_EVP_DigestFinal_ex
#define EVP_DigestInit_ex sym_EVP_DigestInit_ex
#define EVP_DigestUpdate sym_EVP_DigestUpdate
#define EVP_MD_CTX_free sym_EVP_MD_CTX_free
#define EVP_MD_CTX_new sym_EVP_MD_CTX_new
#define EVP_sha256 sym_EVP_sha256
#define OPENSSL_init_crypto sym_OPENSSL_init_crypto
#endif

#endif
